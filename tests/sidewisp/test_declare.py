"""Declare what you saw: an admin declares the routes a run showed; a wait that cannot be decided says why.

Issue 28 §8. The handoffs here are recorded through the real recording service (receipts.ingest.recording.record)
with the route version an app's SidewispMiddleware(route_version="teams/9") would give, a version nobody stored.
"""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse

from receipts import actions
from receipts.ingest.recording import record
from receipts.models import AuditEntry, ContractVersion, Handoff, Run
from tests.conftest import handoff_parts, record_wait_for

pytestmark = pytest.mark.django_db

VERSION = "teams/9"


def record_team_handoff(operation_id: str, kind: str = "healthy", *, receiver: str = "bob") -> Handoff:
    """alice hands to `receiver` under teams/9, saying it hands over order_id (seen with messages after it)."""
    handoff_id = f"h-{uuid.uuid4().hex[:8]}"
    for part, value in handoff_parts(kind, sender="alice", receiver=receiver):
        if part == "created":
            value = {**value, "route_version": VERSION, "route_version_source": "middleware"}
            value["required_context_keys"] = ["order_id"]
        if part == "reduced":
            value = {**value, "context_keys": ["messages", "order_id"]}
        if part == "wait":
            value = {**value, "owner": "ops-lead"}
        handoff = record(handoff_id=handoff_id, operation_id=operation_id, part=part, value=value).handoff
    return handoff


@pytest.fixture
def admin(person):
    return person("boss", "admin")


def declare(client, handoff: Handoff, **data):
    (draft,) = actions.run_drafts(handoff.run)
    form = {"version": draft.version, "digest": draft.digest, "key": uuid.uuid4().hex, "reason": "alice may", **data}
    return client.post(reverse("sidewisp:run-declare", args=[handoff.run_id]), form)


def test_a_route_with_an_unknown_version_is_rejected_with_a_reason_naming_it(contracts):
    handoff = record_team_handoff("op-first")

    assert handoff.verdict == "ROUTE_REJECTED"
    assert handoff.reason == (
        'created.route_version "teams/9" (given as SidewispMiddleware(route_version=...)) '
        "is not a known contract version"
    )


def test_an_admin_is_offered_a_draft_of_what_the_run_showed_against_what_is_stored(contracts, client, admin):
    handoff = record_team_handoff("op-first")
    client.force_login(admin)

    page = client.get(reverse("sidewisp:run-detail", args=[handoff.run_id])).content.decode()

    assert "Declare what you saw" in page
    assert 'data-seen-route="alice→bob"' in page
    assert "messages, order_id" in page  # the context keys seen
    assert "--- nothing stored" in page and "+++ teams/9" in page  # the diff against what is stored
    assert "+    &quot;bob&quot;: [" in page  # escaped JSON in the diff
    assert "Declare teams/9" in page


def test_declaring_the_draft_stores_it_audited_and_the_next_run_is_green(contracts, client, admin):
    handoff = record_team_handoff("op-first")
    client.force_login(admin)

    response = declare(client, handoff)

    assert response.status_code == 200, response.content[:400]
    assert ContractVersion.objects.get(version=VERSION).routes == {"alice": {"bob": ["order_id"]}}
    entry = AuditEntry.objects.get(action="contracts.declare")
    assert (entry.actor_name, entry.outcome, entry.run_id) == ("boss", "done", handoff.run_id)
    assert entry.detail["changed"] == ["alice→bob: added"]
    handoff.refresh_from_db()
    assert handoff.verdict == "HEALTHY"  # judged again against the declared version
    assert record_team_handoff("op-second").verdict == "HEALTHY"


def test_until_a_person_declares_the_next_run_stays_red(contracts):
    record_team_handoff("op-first")

    assert record_team_handoff("op-second").verdict == "ROUTE_REJECTED"
    assert not ContractVersion.objects.filter(version=VERSION).exists()


def test_a_second_declaration_of_the_same_draft_changes_nothing(contracts, client, admin):
    handoff = record_team_handoff("op-first")
    client.force_login(admin)
    (draft,) = actions.run_drafts(handoff.run)
    form = {"version": draft.version, "digest": draft.digest, "key": uuid.uuid4().hex}
    url = reverse("sidewisp:run-declare", args=[handoff.run_id])

    client.post(url, form)
    again = client.post(url, {**form, "key": uuid.uuid4().hex})

    assert again.status_code == 200
    assert "teams/9 is declared already; nothing changed." in again.content.decode()
    assert ContractVersion.objects.filter(version=VERSION).count() == 1


def test_a_draft_that_changed_since_the_page_was_drawn_is_refused(contracts, client, admin):
    handoff = record_team_handoff("op-first")
    client.force_login(admin)
    (drawn,) = actions.run_drafts(handoff.run)
    record_team_handoff("op-first", receiver="carol")  # the run showed another route meanwhile

    response = client.post(
        reverse("sidewisp:run-declare", args=[handoff.run_id]),
        {"version": drawn.version, "digest": drawn.digest, "key": uuid.uuid4().hex},
    )

    assert response.status_code == 409
    assert "changed since the page was drawn" in response.content.decode()
    assert not ContractVersion.objects.filter(version=VERSION).exists()


def test_a_route_missing_from_a_stored_version_is_drafted_as_a_new_version(contracts, client, admin):
    ContractVersion.objects.create(version=VERSION, routes={"alice": {"carol": []}})
    handoff = record_team_handoff("op-first")
    client.force_login(admin)

    declare(client, handoff)

    assert ContractVersion.objects.get(version=VERSION).routes == {"alice": {"carol": []}}  # never edited
    assert ContractVersion.objects.get(version="teams/10").routes == {"alice": {"carol": [], "bob": ["order_id"]}}
    assert actions.run_drafts(handoff.run) == []  # declared: its senders only have to name teams/10


def test_a_non_admin_is_offered_nothing_and_refused_the_post(contracts, client, operator):
    handoff = record_team_handoff("op-first")
    (draft,) = actions.run_drafts(handoff.run)
    client.force_login(operator)

    page = client.get(reverse("sidewisp:run-detail", args=[handoff.run_id])).content.decode()
    response = client.post(
        reverse("sidewisp:run-declare", args=[handoff.run_id]),
        {"version": draft.version, "digest": draft.digest, "key": uuid.uuid4().hex},
    )

    assert "Declare what you saw" not in page
    assert response.status_code == 403
    assert "change-limits permission" in response.content.decode()
    assert not ContractVersion.objects.filter(version=VERSION).exists()
    assert AuditEntry.objects.get(action="contracts.declare").outcome == "denied"


def test_the_map_offers_an_admin_the_run_whose_page_holds_the_draft(contracts, client, admin, operator):
    record_team_handoff("op-first")
    newest = record_team_handoff("op-second")

    client.force_login(admin)
    page = client.get(reverse("sidewisp:map")).content.decode()
    client.force_login(operator)
    theirs = client.get(reverse("sidewisp:map")).content.decode()

    assert "Declare what you saw" in page
    assert "alice → bob (2)" in page
    assert f'href="/runs/{newest.run_id}/#run-{newest.run_id}-declare"' in page
    assert "Declare what you saw" not in theirs


def test_a_wait_whose_route_was_rejected_tells_its_owner_why_and_what_unblocks_it(contracts, client, owner):
    handoff = record_team_handoff("op-wait", "waiting")
    assert (handoff.verdict, handoff.wait_open, handoff.wait_owner) == ("ROUTE_REJECTED", True, "ops-lead")
    client.force_login(owner)

    page = client.get(reverse("sidewisp:waits")).content.decode()

    assert 'data-not-offered="wait"' in page
    assert "Approve and reject are not offered: this handoff failed its route boundary" in page
    assert "an admin declares the route (Declare what you saw on the run page" in page
    assert 'data-action="approve"' not in page


def test_once_the_route_is_declared_its_owner_can_approve_the_wait(contracts, client, admin, owner):
    handoff = record_team_handoff("op-wait", "waiting")
    client.force_login(admin)
    declare(client, handoff)
    client.force_login(owner)

    page = client.get(reverse("sidewisp:waits")).content.decode()

    handoff.refresh_from_db()
    assert handoff.verdict == "WAITING_ON_APPROVAL"
    assert 'data-action="approve"' in page
    assert 'data-not-offered="wait"' not in page


def test_an_uncertain_wait_says_what_it_lacks_to_an_owner_who_cannot_reassign(contracts, client, owner):
    handoff = record_team_handoff("op-unsure", "waiting")
    ContractVersion.objects.create(version=VERSION, routes={"alice": {"bob": ["order_id"]}})
    Handoff.objects.filter(pk=handoff.pk).update(verdict="UNCERTAIN", boundary="wait", reason="wait.owner is missing")
    client.force_login(owner)

    page = client.get(reverse("sidewisp:run-detail", args=[handoff.run_id])).content.decode()

    assert "Approve and reject are not offered: this wait is uncertain (wait.owner is missing)" in page
    assert "An operator can assign them." in page


def test_a_valid_wait_no_graph_can_take_a_decision_from_says_so_and_what_unblocks_it(record_handoff, client, owner):
    handoff = record_handoff("h-imported", "op-imported", "waiting")
    handoff = record_wait_for(handoff, owner="ops-lead")
    Run.objects.filter(pk=handoff.run_id).update(source=Run.Source.IMPORT)
    assert handoff.verdict == "WAITING_ON_APPROVAL"
    client.force_login(owner)

    page = client.get(reverse("sidewisp:waits")).content.decode()

    assert "a decision cannot reach this run&#x27;s graph. Nothing resumes this run" in page
    assert "What unblocks it: an operator cancels the wait" in page
    assert 'data-action="approve"' not in page
