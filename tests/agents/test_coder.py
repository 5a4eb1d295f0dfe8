"""The coder agent end to end: a real shell in a real per-run workspace, checked by the verifier's own test run."""

from __future__ import annotations

import dataclasses

import pytest

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, create_run
from agents.demo.team import declared_transfers
from agents.host import runner, workspaces
from agents.host.scripted import Call, Fail, Say, Script
from receipts.models import Handoff, Run

BUGGY = "return a - b"
FIXED = "return a + b"


@pytest.fixture
def contracts(transactional_db):
    install_team_contracts()


@pytest.fixture(autouse=True)
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    return settings.VAR_DIR


def _verdicts(run: Run) -> list[str]:
    return list(run.handoffs.order_by("created_at", "pk").values_list("verdict", flat=True))


def _calc(run: Run) -> str:
    return (workspaces.workspace_path(run.operation_id) / "calc.py").read_text()


def _with_coder(monkeypatch, name: str, coder: Script) -> Run:
    scenario = dataclasses.replace(
        SCENARIOS["coder_fixes_function"],
        name=name,
        policies={**SCENARIOS["coder_fixes_function"].policies, "coder": coder},
    )
    monkeypatch.setitem(SCENARIOS, name, scenario)
    return create_run(name)


def test_the_coder_is_reachable_from_triage_only_in_routes_3():
    def coder_routes(version: str) -> list[tuple[str, ...]]:
        return [t.context_keys for t in declared_transfers(version) if (t.sender, t.receiver) == ("triage", "coder")]

    assert coder_routes("routes/3") == [("request_type", "task")]
    assert coder_routes("routes/2") == []


def test_the_fixed_function_turns_healthy_because_the_verifiers_own_test_run_passes(contracts):
    run = create_run("coder_fixes_function")

    status = runner.start_run(run)

    handoff = run.handoffs.get()
    assert status == "complete"
    assert _verdicts(run) == ["HEALTHY"]
    assert handoff.destination_part["node_id"] == "coder"
    assert handoff.verification_part["verifier"] == "tests_pass"
    assert handoff.verification_part["result"] == "pass"


def test_a_verified_run_removes_its_workspace(contracts):
    run = create_run("coder_fixes_function")

    runner.start_run(run)

    assert not workspaces.exists(run.operation_id)


def test_a_false_claim_becomes_false_complete_and_keeps_its_workspace(contracts):
    run = create_run("coder_false_claim")

    status = runner.start_run(run)

    assert status == "complete"  # the coder claimed it...
    assert _verdicts(run) == ["FALSE_COMPLETE"]  # ...the verifier's test run says otherwise
    assert run.handoffs.get().verification_part["result"] == "fail"
    assert BUGGY in _calc(run)


def test_reverify_after_a_fix_in_the_kept_workspace_turns_the_run_healthy(contracts):
    run = create_run("coder_false_claim")
    runner.start_run(run)
    path = workspaces.workspace_path(run.operation_id) / "calc.py"
    path.write_text(path.read_text().replace(BUGGY, FIXED))

    result = runner.reverify(run)

    assert result == "pass"
    assert _verdicts(run) == ["HEALTHY"]


def test_reverify_without_a_fix_stays_false_complete(contracts):
    run = create_run("coder_false_claim")
    runner.start_run(run)

    result = runner.reverify(run)

    assert result == "fail"
    assert _verdicts(run) == ["FALSE_COMPLETE"]


def test_tests_rewritten_to_pass_do_not_fool_the_verifier(contracts):
    run = create_run("coder_false_claim")
    runner.start_run(run)
    tests = workspaces.workspace_path(run.operation_id) / "test_calc.py"
    tests.write_text(tests.read_text().replace("add(2, 3), 5", "add(2, 3), -1"))

    assert runner.reverify(run) == "fail"


def test_a_missing_artifact_fails_the_verification(contracts):
    run = create_run("coder_false_claim")
    runner.start_run(run)
    path = workspaces.workspace_path(run.operation_id) / "calc.py"
    path.write_text(path.read_text().replace(BUGGY, FIXED))
    path.rename(path.with_name("calculator.py"))

    assert runner.reverify(run) == "fail"


def test_reverify_of_a_verified_run_whose_workspace_is_gone_is_refused(contracts):
    run = create_run("coder_fixes_function")
    runner.start_run(run)

    with pytest.raises(ValueError, match="workspace was removed"):
        runner.reverify(run)


def test_a_failed_coder_run_keeps_its_workspace(contracts, monkeypatch):
    run = _with_coder(monkeypatch, "coder_model_down", Script((Fail(),)))

    status = runner.start_run(run)

    assert status == "failed"
    assert workspaces.exists(run.operation_id)


def test_a_destructive_command_waits_for_approval_and_deletes_nothing(contracts, monkeypatch):
    coder = Script((Call("shell", {"command": "ls && rm -f calc.py"}), Say("Cleaned up.")))
    run = _with_coder(monkeypatch, "coder_deletes", coder)

    status = runner.start_run(run)

    handoff = Handoff.objects.get(run=run)
    assert status == "waiting"
    assert handoff.wait_part["reason"] == "destructive_command"
    assert (workspaces.workspace_path(run.operation_id) / "calc.py").exists()


def test_a_harmless_command_runs_without_approval(contracts, monkeypatch):
    coder = Script((Call("shell", {"command": "ls -l calc.py"}), Say("Looked.")))
    run = _with_coder(monkeypatch, "coder_looks", coder)

    status = runner.start_run(run)

    assert status == "complete"
    assert Handoff.objects.get(run=run).wait_part is None


def test_the_demo_the_readme_calls_healthy_is_a_healthy_run_with_no_reason_to_look(contracts):
    run = create_run("coder_fixes_function")

    runner.start_run(run)

    run.refresh_from_db()
    assert (run.health, run.health_reasons) == ("healthy", [])
    assert not run.reports.filter(kind="tool_error").exists()
