"""Operation-id squatting (issue 19): a run belongs to the side that created it.

A remote source that posts first for an operation id owns that run: the local app's receipts for the
same id are refused with a log line naming the owner (never merged), and its `await_decision` says the
decisions are not its own. The other way round, a source cannot write or claim a local run's decisions,
nor another source's. Through the real API, the local writer and the real recording service.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from django.urls import reverse

from agents.observe import writer
from agents.observe.decisions import await_decision
from receipts.ingest import intake
from receipts.ingest.recording import RunNotOwned
from receipts.models import Decision, Handoff, Receipt, Run
from receipts.workers import claims
from tests.conftest import handoff_parts
from tests.sidewisp.test_api import a_bundle, claim, get_decision, post

REFUSED = "receipt refused: run {op} was created by source billing; a local app may not record into it"


@pytest.fixture
def billing(db):
    from receipts.workers import sources

    return sources.issue("billing", note="tests")[1]


@pytest.fixture
def boss(person):
    return person("boss", "admin")


@pytest.fixture
def squatted(client, contracts, billing) -> dict:
    """The billing source posted first for an operation id the local app will use too."""
    sent = a_bundle("waiting")
    assert post(client, billing, sent).status_code == 200
    return sent


def local_wait_entries(operation_id: str) -> list[intake.PartEntry]:
    handoff_id = f"h-local-{uuid.uuid4().hex[:6]}"
    return [intake.PartEntry(operation_id, handoff_id, part, value) for part, value in handoff_parts("waiting")]


def decide(client, handoff, user) -> Decision:
    client.force_login(user)
    data = {"decision": "approve", "token": handoff.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    response = client.post(reverse("sidewisp:wait-decide", args=[handoff.pk]), data, follow=True)
    assert response.status_code == 200 and response.redirect_chain[0][1] == 303
    return handoff.decisions.get()


# --- a local app into a source's run ---------------------------------------------------------------


def test_a_local_wait_recorded_under_a_sources_id_is_refused_and_logged(squatted, caplog):
    operation_id = squatted["operation_id"]
    before = Receipt.objects.count()

    with caplog.at_level(logging.WARNING, logger="receipts.ingest.recording"):
        writer.submit_all(local_wait_entries(operation_id))

    run = Run.objects.get(operation_id=operation_id)
    assert run.source_name == "billing"
    assert Receipt.objects.count() == before
    assert run.handoffs.count() == 1  # the source's own handoff only: nothing merged
    assert REFUSED.format(op=operation_id) in caplog.text


def test_the_local_sink_refuses_naming_the_run_and_its_owner(squatted):
    operation_id = squatted["operation_id"]

    with pytest.raises(RunNotOwned) as refused:
        writer.LocalSink().write(local_wait_entries(operation_id)[:1])

    assert (refused.value.field, refused.value.message) == (
        "operation_id",
        f"run {operation_id} was created by source billing; a local app may not record into it",
    )


def test_a_local_report_into_a_sources_run_is_refused_too(squatted, caplog):
    operation_id = squatted["operation_id"]
    report = intake.ReportEntry(operation_id, "alice", "evidence_dropped", {"part": "wait", "field": "x"}, "r-1")

    with caplog.at_level(logging.WARNING, logger="receipts.ingest.recording"):
        writer.submit(report)

    assert not Run.objects.get(operation_id=operation_id).reports.exists()
    assert REFUSED.format(op=operation_id) in caplog.text


def test_a_local_settle_of_a_sources_handoff_is_refused_and_changes_nothing(squatted):
    operation_id = squatted["operation_id"]
    handoff = Run.objects.get(operation_id=operation_id).handoffs.get()
    Handoff.objects.filter(pk=handoff.pk).update(settled_at=None)

    with pytest.raises(RunNotOwned):
        writer.LocalSink().write([intake.SettleEntry(operation_id, handoff.handoff_id)])

    assert Handoff.objects.get(pk=handoff.pk).settled_at is None


def test_the_local_app_cannot_await_a_sources_decision(client, squatted, boss):
    run = Run.objects.get(operation_id=squatted["operation_id"])
    decision = decide(client, run.handoffs.get(), boss)

    with pytest.raises(RunNotOwned) as refused:
        await_decision(run.operation_id, timeout=0)

    assert "was created by source billing; a local app may not claim its decisions" in str(refused.value)
    decision.refresh_from_db()
    assert decision.applied_at is None


def test_the_source_still_claims_its_own_runs_decision(client, squatted, boss, billing):
    run = Run.objects.get(operation_id=squatted["operation_id"])
    decision = decide(client, run.handoffs.get(), boss)

    response = claim(client, billing, run.operation_id, decision.pk)

    assert response.status_code == 200


def test_claims_refuse_a_local_claim_of_a_sources_decision_at_the_source(client, squatted, boss):
    run = Run.objects.get(operation_id=squatted["operation_id"])
    decision = decide(client, run.handoffs.get(), boss)

    with pytest.raises(RunNotOwned):
        claims.claim(decision, resumed_by="app")

    assert Decision.objects.get(pk=decision.pk).applied_at is None


# --- a source into a local run, or into another source's ----------------------------------------------


@pytest.fixture
def local_wait(record_handoff):
    return record_handoff("h-local", "op-local", "waiting")


def test_a_source_posting_into_a_local_run_is_refused_naming_the_entry(client, billing, local_wait):
    before = Receipt.objects.count()

    response = post(client, billing, a_bundle(operation_id="op-local"))

    assert response.status_code == 403
    error = response.json()["error"]
    assert error["field"] == "entries[0].operation_id"
    assert "run op-local is a local run" in error["message"]
    assert (Receipt.objects.count(), Run.objects.get(operation_id="op-local").source_name) == (before, "")


def test_a_source_cannot_read_or_claim_a_local_runs_decision_and_the_local_app_can(client, billing, local_wait, boss):
    decision = decide(client, local_wait, boss)

    seen = get_decision(client, billing, "op-local")
    taken = claim(client, billing, "op-local", decision.pk)
    command = await_decision("op-local", timeout=0)

    assert (seen.status_code, taken.status_code) == (403, 403)
    assert seen.json()["error"]["field"] == "operation_id"
    assert command is not None
    assert Decision.objects.get(pk=decision.pk).applied_at is not None


def test_a_source_posting_into_another_sources_run_is_refused(client, squatted, db):
    from receipts.workers import sources

    shipping = sources.issue("shipping", note="tests")[1]

    response = post(client, shipping, {"entries": [e for e in _entries(squatted)]})

    assert response.status_code == 403
    assert response.json()["error"]["field"] == "entries[0].operation_id"
    assert "created by source billing, not by source shipping" in response.json()["error"]["message"]


def _entries(bundle: dict) -> list[dict]:
    return [
        {
            "kind": "part",
            "operation_id": bundle["operation_id"],
            "handoff_id": "h-x",
            "part": "created",
            "value": bundle["created"],
        }
    ]
