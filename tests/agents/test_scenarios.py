from __future__ import annotations

import json

import pytest
from django.core.management import call_command

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, create_run
from agents.host import runner
from receipts.models import ContractVersion, Run, WaitReason


@pytest.fixture
def contracts(transactional_db):
    # Transactional tests flush the rows the data migration loaded.
    install_team_contracts()


def _verdicts(run: Run) -> list[str]:
    return list(run.handoffs.order_by("created_at", "pk").values_list("verdict", flat=True))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_reaches_its_expected_verdicts(contracts, name):
    run = create_run(name)

    runner.start_run(run)

    assert _verdicts(run) == list(SCENARIOS[name].expected)


def test_the_catalogue_covers_every_verdict():
    covered = {verdict for scenario in SCENARIOS.values() for verdict in scenario.expected}

    assert covered == {
        "HEALTHY",
        "ROUTE_REJECTED",
        "STALE_CONTROL",
        "OPEN_TOOL_PROTOCOL",
        "CONTEXT_INCOMPLETE",
        "DESTINATION_NOT_STARTED",
        "WAITING_ON_APPROVAL",
        "UNCERTAIN",
        "FALSE_COMPLETE",
    }


def test_a_healthy_run_completes_with_every_boundary_proven(contracts):
    run = create_run("healthy_purchase")

    status = runner.start_run(run)

    run.refresh_from_db()
    handoff = run.handoffs.get()
    assert (status, run.status, handoff.final_status) == ("complete", "complete", "complete")
    assert handoff.destination_part["node_id"] == "sales"
    assert handoff.verification_part["result"] == "pass"


def test_a_transfer_to_an_undeclared_agent_fails_the_run(contracts):
    run = create_run("route_rejected")

    status = runner.start_run(run)

    handoff = run.handoffs.get()
    assert status == "failed"
    assert handoff.reduced_part["goto"] == "refunds_desk"
    assert handoff.destination_part is None


def test_a_held_destination_parks_the_run(contracts):
    run = create_run("destination_not_started")

    status = runner.start_run(run)

    assert status == "parked"
    assert run.handoffs.get().destination_part is None


@pytest.mark.django_db
def test_a_fresh_database_knows_the_team_contracts():
    assert set(ContractVersion.objects.values_list("version", flat=True)) >= {"routes/1", "routes/2"}
    assert set(WaitReason.objects.values_list("code", flat=True)) >= {"purchase_approval", "secret_disclosure"}


def test_run_scenario_inline_prints_each_handoff_and_a_summary(contracts, capsys):
    call_command("run_scenario", "healthy_billing_chain", "--inline")

    lines = capsys.readouterr().out.strip().splitlines()
    rows = [json.loads(line) for line in lines[:-1]]
    assert [(r["scenario"], r["verdict"], r["expected"]) for r in rows] == [
        ("healthy_billing_chain", "HEALTHY", "HEALTHY"),
        ("healthy_billing_chain", "HEALTHY", "HEALTHY"),
    ]
    assert lines[-1] == "2 handoffs, 2 as expected, 0 not"


def test_run_scenario_exits_1_when_a_verdict_is_unexpected(contracts, monkeypatch, capsys):
    scenario = SCENARIOS["false_complete"]
    monkeypatch.setitem(SCENARIOS, "false_complete", type(scenario)(**{**vars(scenario), "expected": ("HEALTHY",)}))

    with pytest.raises(SystemExit) as exit_info:
        call_command("run_scenario", "false_complete", "--inline")

    assert exit_info.value.code == 1
    assert capsys.readouterr().out.strip().splitlines()[-1] == "1 handoffs, 0 as expected, 1 not"


def test_run_scenario_exits_2_when_no_worker_answers(contracts, monkeypatch, capsys):
    from sidewisp.celery import app

    monkeypatch.setattr(app.control, "ping", lambda timeout=1: [])

    with pytest.raises(SystemExit) as exit_info:
        call_command("run_scenario", "healthy_purchase")

    assert exit_info.value.code == 2
    assert "worker" in capsys.readouterr().err
