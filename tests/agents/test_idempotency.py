"""One operation, one external action: repeated calls and re-runs never act twice."""

from __future__ import annotations

import dataclasses

import pytest

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, TRIAGE_TO_SALES, create_run
from agents.host import runner
from agents.host.scripted import Call, Say, Script
from agents.models import Order, Ticket
from receipts.models import Receipt


@pytest.fixture
def contracts(transactional_db):
    install_team_contracts()


def test_a_repeated_order_call_places_one_order(contracts, monkeypatch):
    twice = Script(
        (
            Call("place_order", {"sku": "widget", "quantity": 2}),
            Call("place_order", {"sku": "widget", "quantity": 2}),
            Say("Ordered."),
        )
    )
    scenario = dataclasses.replace(
        SCENARIOS["healthy_purchase"], name="double_order", policies={"triage": TRIAGE_TO_SALES, "sales": twice}
    )
    monkeypatch.setitem(SCENARIOS, "double_order", scenario)
    run = create_run("double_order")

    runner.start_run(run)

    assert Order.objects.filter(operation_id=run.operation_id).count() == 1


def test_starting_a_finished_run_again_changes_nothing(contracts):
    run = create_run("healthy_support")
    runner.start_run(run)
    receipts = Receipt.objects.filter(handoff__run=run).count()

    status = runner.start_run(run)

    assert status == "complete"
    assert Ticket.objects.filter(operation_id=run.operation_id).count() == 1
    assert Receipt.objects.filter(handoff__run=run).count() == receipts


def test_starting_a_waiting_run_again_keeps_it_waiting(contracts):
    run = create_run("waiting_on_approval")
    runner.start_run(run)

    status = runner.start_run(run)

    assert status == "waiting"
    assert run.handoffs.get().receipts.filter(part="wait").count() == 1
