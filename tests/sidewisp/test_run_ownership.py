"""Operation ids cannot be squatted (issue 29 §4; issue 19 refused the later side, which let anyone holding a
token block a local app's wait by posting its id first).

A run is keyed by its source and its operation id, and a handoff by its run's source and its id: a remote
source's ids live in its own namespace. A source and a local app using the same operation id (and the same
handoff id) each get their own run, and two sources likewise; the local app's `await_decision` works; a source
learns nothing of another side's runs (its answers are those for an unknown id, issue 29 §3). Through the real
API, the local writer and the real recording service.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from django.urls import reverse
from sidewisp_agent.decisions import await_decision
from sidewisp_agent.entries import RunNotOwned

from agents.observe import writer
from receipts.ingest import intake
from receipts.models import Decision, Handoff, Receipt, Run
from receipts.workers import claims
from tests.conftest import handoff_parts
from tests.sidewisp.test_api import a_bundle, claim, get_decision, post


@pytest.fixture
def billing(db):
    from receipts.workers import sources

    return sources.issue("billing", note="tests")[1]


@pytest.fixture
def shipping(db):
    from receipts.workers import sources

    return sources.issue("shipping", note="tests")[1]


@pytest.fixture
def boss(person):
    return person("boss", "admin")


@pytest.fixture
def squatted(client, contracts, billing) -> dict:
    """The billing source posted first for an operation id (and handoff id) the local app will use too."""
    sent = a_bundle("waiting")
    assert post(client, billing, sent).status_code == 200
    return sent


def local_wait_entries(operation_id: str, handoff_id: str | None = None) -> list[intake.PartEntry]:
    handoff_id = handoff_id or f"h-local-{uuid.uuid4().hex[:6]}"
    return [intake.PartEntry(operation_id, handoff_id, part, value) for part, value in handoff_parts("waiting")]


def decide(client, handoff, user) -> Decision:
    client.force_login(user)
    data = {"decision": "approve", "token": handoff.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    response = client.post(reverse("sidewisp:wait-decide", args=[handoff.pk]), data, follow=True)
    assert response.status_code == 200 and response.redirect_chain[0][1] == 303
    client.logout()
    return handoff.decisions.get()


def runs_of(operation_id: str) -> dict[str, Run]:
    return {run.source_name: run for run in Run.objects.filter(operation_id=operation_id)}


# --- a local app under a source's operation id ----------------------------------------------------------


def test_a_source_and_a_local_app_using_one_operation_id_each_get_their_own_run(squatted, caplog):
    operation_id, handoff_id = squatted["operation_id"], squatted["handoff_id"]
    source_receipts = Receipt.objects.count()

    with caplog.at_level(logging.WARNING):
        writer.submit_all(local_wait_entries(operation_id, handoff_id))  # the same handoff id too

    runs = runs_of(operation_id)
    assert sorted(runs) == ["", "billing"]
    local, remote = runs[""], runs["billing"]
    assert [h.handoff_id for h in local.handoffs.all()] == [h.handoff_id for h in remote.handoffs.all()] == [handoff_id]
    assert local.handoffs.get().verdict == remote.handoffs.get().verdict == "WAITING_ON_APPROVAL"
    assert Receipt.objects.filter(handoff__run=remote).count() == source_receipts  # nothing merged into it
    assert Receipt.objects.filter(handoff__run=local).count() == len(handoff_parts("waiting"))
    assert "refused" not in caplog.text


def test_the_local_apps_await_decision_works_under_an_id_a_source_posted_first(client, squatted, boss, billing):
    operation_id = squatted["operation_id"]
    writer.submit_all(local_wait_entries(operation_id))
    local = runs_of(operation_id)[""]
    decision = decide(client, local.handoffs.get(), boss)

    command = await_decision(operation_id, timeout=0)

    assert command is not None and command.resume is not None
    decision.refresh_from_db()
    assert decision.applied_at is not None
    # The source's own run has no decision, and the local one is not offered to it.
    assert get_decision(client, billing, operation_id).json()["decision"] is None
    assert not Decision.objects.filter(run=runs_of(operation_id)["billing"]).exists()


def test_the_source_still_claims_its_own_runs_decision_and_the_local_app_does_not_see_it(
    client, squatted, boss, billing
):
    run = runs_of(squatted["operation_id"])["billing"]
    decision = decide(client, run.handoffs.get(), boss)

    assert await_decision(run.operation_id, timeout=0) is None  # no local run of that id: nothing to claim
    response = claim(client, billing, run.operation_id, decision.pk)

    assert response.status_code == 200
    assert Decision.objects.get(pk=decision.pk).applied_at is not None


def test_a_local_settle_under_a_sources_ids_changes_nothing_of_the_sources_handoff(squatted):
    handoff = runs_of(squatted["operation_id"])["billing"].handoffs.get()
    Handoff.objects.filter(pk=handoff.pk).update(settled_at=None)

    writer.LocalSink().write([intake.SettleEntry(handoff.run.operation_id, handoff.handoff_id)])

    assert Handoff.objects.get(pk=handoff.pk).settled_at is None
    assert sorted(runs_of(handoff.run.operation_id)) == ["billing"]  # a settle creates nothing


# --- a source under a local run's ids, or another source's ---------------------------------------------


@pytest.fixture
def local_wait(record_handoff):
    return record_handoff("h-local", "op-local", "waiting")


def test_a_source_posting_a_local_runs_ids_gets_its_own_run_answered_as_for_new_ids(client, billing, local_wait):
    before = Receipt.objects.filter(handoff=local_wait).count()

    taken = post(client, billing, a_bundle("healthy", operation_id="op-local", handoff_id="h-local"))
    fresh = post(client, billing, a_bundle("healthy", operation_id="op-fresh", handoff_id="h-fresh"))

    assert (taken.status_code, taken.json()) == (fresh.status_code, fresh.json())  # no existence oracle
    assert taken.status_code == 200
    assert Receipt.objects.filter(handoff=local_wait).count() == before
    local_wait.refresh_from_db()
    assert local_wait.verdict == "WAITING_ON_APPROVAL"
    assert runs_of("op-local")["billing"].handoffs.get().verdict == "HEALTHY"


def test_a_source_cannot_read_or_claim_a_local_runs_decision_and_the_local_app_can(client, billing, local_wait, boss):
    decision = decide(client, local_wait, boss)

    seen, unknown = get_decision(client, billing, "op-local"), get_decision(client, billing, "op-nobody")
    taken = claim(client, billing, "op-local", decision.pk)
    command = await_decision("op-local", timeout=0)

    # Answered as an id no run has (issue 29 §3): the same status and body.
    assert (seen.status_code, seen.json()) == (404, {"error": {"field": "operation_id", "message": "names no run"}})
    assert (unknown.status_code, unknown.json()) == (seen.status_code, seen.json())
    assert (taken.status_code, taken.json()) == (seen.status_code, seen.json())
    assert command is not None
    assert Decision.objects.get(pk=decision.pk).applied_at is not None


def test_two_sources_using_one_operation_id_each_get_their_own_run(client, squatted, shipping, boss, billing):
    response = post(client, shipping, squatted)  # the very same bundle: operation id and handoff id

    assert response.status_code == 200
    runs = runs_of(squatted["operation_id"])
    assert sorted(runs) == ["billing", "shipping"]
    assert runs["billing"].handoffs.get().pk != runs["shipping"].handoffs.get().pk
    # Each source is offered and claims its own run's decision only.
    decision = decide(client, runs["shipping"].handoffs.get(), boss)
    assert get_decision(client, billing, squatted["operation_id"]).json()["decision"] is None
    offered = get_decision(client, shipping, squatted["operation_id"]).json()["decision"]
    assert offered["id"] == decision.pk
    assert claim(client, billing, squatted["operation_id"], decision.pk).status_code == 404
    assert claim(client, shipping, squatted["operation_id"], decision.pk).status_code == 200


def test_a_claim_of_another_sides_run_is_refused_without_naming_the_source_that_holds_it(client, squatted, boss):
    """The guard behind the namespaces (a caller holding another side's decision): the refusal names the run
    and the side refused, never the source that holds the run (issue 29 §3: "created by source billing" was one)."""
    run = runs_of(squatted["operation_id"])["billing"]
    decision = decide(client, run.handoffs.get(), boss)

    for side in ("shipping", None):  # another source, a local app
        with pytest.raises(RunNotOwned) as refused:
            claims.claim(decision, resumed_by="test", source=side)
        assert run.operation_id in refused.value.message
        assert "billing" not in refused.value.message
    assert Decision.objects.get(pk=decision.pk).applied_at is None
