"""A secret in the user's message, a tool argument and a tool result never reaches evidence or logs."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
from django.core import serializers

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, TRIAGE_TO_SUPPORT, create_run, transfer_arg
from agents.host import runner
from agents.host.checkpoints import checkpointer
from agents.host.scripted import Call, Say, Script
from receipts.models import Handoff, MiddlewareReport, Receipt, Run

CANARY = "canary-7f3a9c-do-not-leak"


@pytest.fixture
def canary_run(transactional_db, monkeypatch):
    install_team_contracts()
    support = Script(
        (
            Call("add_note", lambda messages: {"ticket_id": transfer_arg(messages, "ticket_id"), "note": CANARY}),
            Call(
                "update_ticket",
                lambda messages: {"ticket_id": transfer_arg(messages, "ticket_id"), "state": "resolved"},
            ),
            Say("Noted and resolved."),
        )
    )
    scenario = dataclasses.replace(
        SCENARIOS["healthy_support"],
        name="canary",
        message=f"My password is {CANARY}, please fix my login.",
        policies={"triage": TRIAGE_TO_SUPPORT, "support": support},
    )
    monkeypatch.setitem(SCENARIOS, "canary", scenario)
    return create_run("canary")


def _graph_messages(run: Run) -> str:
    with checkpointer() as saver:
        graph = SCENARIOS[run.scenario].build(saver).graph
        state = graph.get_state(runner.graph_config(run), subgraphs=True)
    return repr(state)


def test_the_canary_reaches_no_receipt_report_or_log_line(canary_run, caplog):
    caplog.set_level(logging.DEBUG)

    runner.start_run(canary_run)

    # The secret really went through the graph: message, tool argument and tool result.
    assert _graph_messages(canary_run).count(CANARY) >= 3
    rows = [
        *Receipt.objects.filter(handoff__run=canary_run),
        *Handoff.objects.filter(run=canary_run),
        *MiddlewareReport.objects.filter(run=canary_run),
        Run.objects.get(pk=canary_run.pk),
    ]
    stored = serializers.serialize("json", rows)
    assert json.loads(stored)
    assert CANARY not in stored
    assert all(CANARY not in record.getMessage() for record in caplog.records)


def test_the_canary_reaches_no_event_and_no_page(canary_run, monkeypatch, client, django_user_model):
    from django.contrib.auth.models import Permission

    from receipts.ingest import broadcast

    published = []
    real_publish = broadcast.publish
    monkeypatch.setattr(broadcast, "publish", lambda event: published.append(event) or real_publish(event))

    runner.start_run(canary_run)

    assert published, "the run published no event at all"
    assert CANARY not in repr(published)
    viewer = django_user_model.objects.create_user("canary-viewer")
    viewer.user_permissions.add(Permission.objects.get(codename="view_dashboard"))
    client.force_login(viewer)
    for url in ["/", "/runs/", f"/runs/{canary_run.pk}/", "/waits/", "/false-completions/"]:
        response = client.get(url)
        assert response.status_code == 200
        assert CANARY not in response.content.decode()
