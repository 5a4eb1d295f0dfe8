"""Approval waits: the run stops at the interrupt, and only a well-formed decision resumes it."""

from __future__ import annotations

import pytest
from sidewisp_agent.waits import resume_token_id

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, create_run
from agents.host import runner
from agents.host.checkpoints import checkpointer
from agents.models import Order


@pytest.fixture
def contracts(transactional_db):
    install_team_contracts()


@pytest.fixture
def waiting_run(contracts):
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    return run


def _pending_interrupts(run) -> list:
    with checkpointer() as saver:
        graph = SCENARIOS[run.scenario].build(saver).graph
        return list(graph.get_state(runner.graph_config(run)).interrupts)


def test_an_order_above_the_threshold_waits_for_its_owner(waiting_run):
    handoff = waiting_run.handoffs.get()

    waiting_run.refresh_from_db()
    assert (waiting_run.status, handoff.verdict) == ("waiting", "WAITING_ON_APPROVAL")
    assert (handoff.wait_owner, handoff.wait_part["reason"]) == ("ops-lead", "purchase_approval")
    assert handoff.wait_part["state_persisted"] is True
    assert not Order.objects.filter(operation_id=waiting_run.operation_id).exists()


def test_the_resume_token_is_bound_to_the_interrupt(waiting_run):
    (pending,) = _pending_interrupts(waiting_run)

    token = waiting_run.handoffs.get().wait_part["resume_token_id"]

    assert token == resume_token_id(waiting_run.operation_id, pending.id)


def test_approving_completes_the_run_with_one_order(waiting_run):
    status = runner.resume_run(waiting_run, {"type": "approve"})

    handoff = waiting_run.handoffs.get()
    assert status == "complete"
    assert handoff.verdict == "HEALTHY"
    assert handoff.wait_part["resolved"] is True
    assert Order.objects.filter(operation_id=waiting_run.operation_id).count() == 1


def test_rejecting_leaves_no_order_and_the_honest_answer_is_healthy(waiting_run):
    runner.resume_run(waiting_run, {"type": "reject", "message": "over budget"})

    assert not Order.objects.filter(operation_id=waiting_run.operation_id).exists()
    assert waiting_run.handoffs.get().verdict == "HEALTHY"


def test_an_edit_changes_what_the_tool_does(waiting_run):
    runner.resume_run(waiting_run, {"type": "edit", "args": {"sku": "widget"}})

    assert Order.objects.get(operation_id=waiting_run.operation_id).sku == "widget"


@pytest.mark.parametrize(
    "decision",
    [
        "yes",
        {"type": "maybe"},
        {"type": "approve", "note": "extra"},
        {"type": "reject"},
        {"type": "reject", "message": "   "},
        {"type": "edit", "args": {}},
        {"type": "edit", "args": {"price": 1}},
    ],
)
def test_a_malformed_decision_is_refused_and_the_thread_still_resumes(waiting_run, decision):
    with pytest.raises(ValueError):
        runner.resume_run(waiting_run, decision)

    assert len(_pending_interrupts(waiting_run)) == 1
    assert runner.resume_run(waiting_run, {"type": "approve"}) == "complete"


def test_a_run_without_a_pending_approval_cannot_be_resumed(contracts):
    run = create_run("healthy_purchase")
    runner.start_run(run)

    with pytest.raises(ValueError, match="no pending approval"):
        runner.resume_run(run, {"type": "approve"})


def test_a_wait_without_an_owner_is_uncertain(contracts):
    run = create_run("uncertain_wait")

    status = runner.start_run(run)

    handoff = run.handoffs.get()
    assert (status, handoff.verdict, handoff.wait_owner) == ("waiting", "UNCERTAIN", "")


def test_reverify_records_a_fresh_verification(waiting_run):
    runner.resume_run(waiting_run, {"type": "approve"})
    before = waiting_run.handoffs.get().receipts.filter(part="verification").count()

    result = runner.reverify(waiting_run)

    assert result == "pass"
    assert waiting_run.handoffs.get().receipts.filter(part="verification").count() == before + 1
