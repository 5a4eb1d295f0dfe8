"""A wait's resolution on every path, and what the outcome verifier proves after a declined wait."""

from __future__ import annotations

from datetime import timedelta

import pytest
from langgraph.types import Command
from sidewisp_agent import OutcomeVerifier, claims_done
from sidewisp_agent.decisions import resume_value

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, create_run
from agents.demo.verifiers import verifier
from agents.host import execution, runner
from agents.host.checkpoints import checkpointer
from agents.models import Order
from receipts import actions
from receipts.models import Decision, Run
from tests.agents.stored import observe


@pytest.fixture
def contracts(transactional_db):
    install_team_contracts()


def _waiting(name: str = "waiting_on_approval") -> Run:
    run = create_run(name)
    runner.start_run(run)
    return run


def _handoff(run: Run):
    return run.handoffs.get()


@pytest.mark.parametrize(
    ("decision", "resolution"),
    [
        ({"type": "approve"}, "approved"),
        ({"type": "edit", "args": {"quantity": 2}}, "edited"),
        ({"type": "reject", "message": "over budget"}, "rejected"),
    ],
)
def test_the_workers_resume_records_the_decisions_resolution(contracts, decision, resolution):
    run = _waiting()

    runner.resume_run(run, decision)

    wait = _handoff(run).wait_part
    assert (wait["resolved"], wait["resolution"]) == (True, resolution)


def test_a_rejected_run_that_says_so_honestly_is_healthy(contracts):
    run = _waiting()

    runner.resume_run(run, {"type": "reject", "message": "over budget"})

    handoff = _handoff(run)
    assert not Order.objects.filter(operation_id=run.operation_id).exists()
    assert (handoff.verdict, handoff.verification_part["result"]) == ("HEALTHY", "pass")
    assert handoff.verification_part["verifier"] == "order_exists.declined"


def test_a_rejected_run_that_claims_the_order_is_a_false_completion(contracts):
    run = _waiting("false_claim_after_rejection")

    runner.resume_run(run, {"type": "reject", "message": "over budget"})

    assert _handoff(run).verdict == "FALSE_COMPLETE"
    assert not Order.objects.filter(operation_id=run.operation_id).exists()


def test_reopening_a_false_claim_after_rejection_fails_again_and_an_honest_one_passes(contracts):
    liar, honest = _waiting("false_claim_after_rejection"), _waiting()
    for run in (liar, honest):
        runner.resume_run(run, {"type": "reject", "message": "over budget"})

    assert (runner.reverify(liar), runner.reverify(honest)) == ("fail", "pass")


@pytest.mark.parametrize(
    ("name", "verdict"), [("waiting_on_approval", "HEALTHY"), ("false_claim_after_rejection", "FALSE_COMPLETE")]
)
def test_an_expired_wait_is_resolved_as_expired_and_judged_like_a_rejection(
    contracts, django_capture_on_commit_callbacks, name, verdict
):
    run = _waiting(name)
    handoff = _handoff(run)
    with django_capture_on_commit_callbacks(execute=False):
        assert actions.expire_overdue_waits(now=handoff.wait_deadline + timedelta(minutes=1)) == 1
    handoff.refresh_from_db()
    assert (handoff.wait_open, handoff.wait_part["resolution"]) == (False, "expired")

    execution.resume(Decision.objects.get(run=run).pk)

    handoff.refresh_from_db()
    assert (handoff.wait_part["resolution"], handoff.verdict) == ("expired", verdict)
    assert handoff.verification_part["verifier"] == "order_exists.declined"


def test_a_cancelled_wait_is_resolved_as_cancelled(contracts, person):
    run = _waiting()
    operator = person("op", "operator")

    actions.cancel(user=operator, handoff_id=_handoff(run).pk, key="c" * 32, reason="customer withdrew")

    wait = _handoff(run).wait_part
    assert (wait["resolved"], wait["resolution"]) == (True, "cancelled")


def test_an_observed_apps_resume_records_the_resolution_and_the_declined_rule(contracts):
    scenario = SCENARIOS["waiting_on_approval"]
    config = {"configurable": {"thread_id": "t-observed", "operation_id": "op-observed"}}
    with checkpointer() as saver:
        team = scenario.build(saver)
        observing = {"wait_policies": team.wait_policies, "verifier": verifier("order_exists")}
        assert observe(team.graph, scenario.graph_input(), config, **observing).status == "waiting"
        schema = Run.objects.get(operation_id="op-observed").pending_call["arg_schema"]
        pending = team.graph.get_state(config).interrupts
        command = Command(resume=resume_value(pending, {"type": "reject", "message": "no"}))
        assert observe(team.graph, command, config, **observing).status == "complete"

    handoff = Run.objects.get(operation_id="op-observed").handoffs.get()
    assert schema["quantity"] == {"type": "integer", "minimum": 1, "maximum": 100, "required": True}
    assert (handoff.wait_part["resolution"], handoff.verdict) == ("rejected", "HEALTHY")


def test_the_pending_call_keeps_the_argument_schema_and_no_value(contracts):
    run = _waiting()

    run.refresh_from_db()
    assert "server" not in str(run.pending_call)
    assert run.pending_call["arg_schema"]["sku"] == {"type": "string", "required": True}


@pytest.mark.parametrize(
    ("text", "claimed"),
    [
        ("Your server is ordered.", True),
        ("All set!", True),
        ("", True),
        ("I did not place the order: the purchase was not approved.", False),
        ("The order wasn't placed; the approval expired.", False),
        ("Your request was declined by ops-lead.", False),
    ],
)
def test_the_default_claim_check_counts_anything_but_an_admission_as_a_claim(text, claimed):
    assert claims_done(text) is claimed


def test_a_verifier_may_bring_its_own_claim_check(contracts):
    run = _waiting("false_claim_after_rejection")
    runner.resume_run(run, {"type": "reject", "message": "over budget"})
    lenient = OutcomeVerifier(verifier("order_exists"), claims_done=lambda text: "definitely" in text)

    from sidewisp_agent.conclusion import verify

    assert verify(run.operation_id, lenient, attempt="own-check", final_message="Your server is ordered.") == "pass"


@pytest.mark.parametrize(("decision", "verdict"), [("reject", "pass"), ("approve", "fail")])
def test_in_remote_mode_the_declined_rule_follows_the_decision_the_app_resumed_with(
    contracts, settings, monkeypatch, decision, verdict
):
    # Remote mode: the waits live on the server, so the decision the app resumed with says whether the
    # outcome to prove is "the order was not placed" (rejected) or "the order exists" (approved).
    from sidewisp_agent.elsewhere import Elsewhere

    from agents.observe import writer
    from receipts.ingest.intake import PartEntry

    sent: list = []

    class Sink(Elsewhere):  # the server: the waits are its own
        def write(self, entries) -> None:
            sent.extend(entries)

    settings.SIDEWISP_REMOTE_URL = "https://sidewisp.example"
    writer.shutdown()
    monkeypatch.setattr(writer, "sink", Sink)
    scenario = SCENARIOS["waiting_on_approval"]
    config = {"configurable": {"thread_id": f"t-remote-{decision}", "operation_id": f"op-remote-{decision}"}}
    no_order = OutcomeVerifier(lambda operation_id: ("order_exists", "fail", f"v-{operation_id}"))
    try:
        with checkpointer() as saver:
            team = scenario.build(saver)
            assert observe(team.graph, scenario.graph_input(), config, verifier=no_order).status == "waiting"
            pending = team.graph.get_state(config).interrupts
            choice = {"type": "reject", "message": "no"} if decision == "reject" else {"type": "approve"}
            command = Command(resume=resume_value(pending, choice))
            assert observe(team.graph, command, config, verifier=no_order).status == "complete"
    finally:
        writer.shutdown()

    verification = [e for e in sent if isinstance(e, PartEntry) and e.part == "verification"][-1].value
    declined = decision == "reject"
    assert verification["verifier"] == ("order_exists.declined" if declined else "order_exists")
    assert verification["result"] == verdict
