"""The resume token is single use and bound to one open, unexpired wait; the audit log is append-only."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.urls import reverse

from receipts import actions
from receipts.models import AppendOnlyError, AuditEntry, Decision
from tests.conftest import record_wait_for


@pytest.fixture
def wait(scenario_handoff):
    return scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")


@pytest.fixture
def enqueued(monkeypatch):
    """The decision ids handed to resume_run (after commit)."""
    from agents import tasks

    ids: list[int] = []
    monkeypatch.setattr(tasks.resume_run, "delay", ids.append)
    return ids


def approve(user, handoff, *, token=None, key=None, **kwargs):
    return actions.decide(
        user=user,
        handoff_id=handoff.pk,
        kind=kwargs.pop("kind", "approve"),
        token=handoff.wait_part["resume_token_id"] if token is None else token,
        key=key or uuid.uuid4().hex,
        **kwargs,
    )


def test_an_approval_creates_one_decision_and_resumes_after_commit(
    owner, wait, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        result = approve(owner, wait)

    decision = Decision.objects.get()
    assert result.outcome == "done"
    assert (decision.kind, decision.decided_by, decision.handoff_id) == ("approve", owner, wait.pk)
    assert enqueued == [decision.pk]


def test_a_replayed_request_changes_nothing_and_says_who_decided_and_when(
    owner, wait, enqueued, django_capture_on_commit_callbacks
):
    key = uuid.uuid4().hex
    with django_capture_on_commit_callbacks(execute=True):
        approve(owner, wait, key=key)
        replay = approve(owner, wait, key=key)

    assert replay.outcome == "noop"
    assert "by ops-lead at" in replay.message
    assert Decision.objects.count() == 1
    assert len(enqueued) == 1
    assert AuditEntry.objects.filter(outcome="noop").count() == 1


def test_a_double_submit_from_a_second_tab_is_idempotent(owner, person, wait, enqueued):
    boss = person("boss", "admin")
    approve(owner, wait)

    second = approve(boss, wait, kind="reject", reason="too late")

    assert second.outcome == "noop"
    assert Decision.objects.get().kind == "approve"


def test_a_forged_token_is_refused(owner, wait):
    result = approve(owner, wait, token="rt-forged")

    assert result.outcome == "refused"
    assert "does not belong to this wait" in result.message
    assert not Decision.objects.exists()
    assert AuditEntry.objects.get().outcome == "refused"


def test_a_token_from_another_wait_is_refused(owner, wait, scenario_handoff):
    other = scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
    other = record_wait_for(other, resume_token_id="rt-the-other-wait")

    result = approve(owner, wait, token=other.wait_part["resume_token_id"])

    assert result.outcome == "refused"
    assert not Decision.objects.exists()


def test_an_expired_token_is_refused(owner, wait):
    result = approve(owner, wait, now=wait.wait_deadline + timedelta(seconds=1))

    assert result.outcome == "refused"
    assert "deadline has passed" in result.message
    assert not Decision.objects.exists()


def test_a_wait_that_is_already_resolved_cannot_be_decided(owner, wait):
    resolved = record_wait_for(wait, resolved=True)

    result = approve(owner, resolved)

    assert result.outcome == "refused"
    assert not Decision.objects.exists()


def test_an_edit_is_refused_when_the_pending_tool_call_cannot_be_read(owner, wait):
    result = approve(owner, wait, kind="edit", edited_args={"sku": "widget"})

    assert result.outcome == "refused"
    assert not Decision.objects.exists()


def test_a_double_submitted_form_through_the_page_is_one_decision(client, owner, wait, enqueued):
    client.force_login(owner)
    data = {"decision": "approve", "token": wait.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    url = reverse("sidewisp:wait-decide", args=[wait.pk])

    first, second = client.post(url, data, follow=True), client.post(url, data, follow=True)

    assert (first.redirect_chain[0][1], second.redirect_chain[0][1]) == (303, 303)  # each to its result page
    assert (first.status_code, second.status_code) == (200, 200)
    assert "Already decided (approve) by ops-lead" in second.content.decode()
    assert Decision.objects.count() == 1


def test_audit_entries_cannot_be_updated_or_deleted(owner, wait):
    approve(owner, wait)
    entry = AuditEntry.objects.get()

    entry.reason = "rewritten"
    with pytest.raises(AppendOnlyError):
        entry.save()
    with pytest.raises(AppendOnlyError):
        entry.delete()
    with pytest.raises(AppendOnlyError):
        AuditEntry.objects.filter(pk=entry.pk).update(reason="rewritten")
    with pytest.raises(AppendOnlyError):
        AuditEntry.objects.all().delete()


def test_the_admin_cannot_add_change_or_delete_audit_entries(client, django_user_model, owner, wait):
    approve(owner, wait)
    entry = AuditEntry.objects.get()
    root = django_user_model.objects.create_superuser("root", password=None)
    client.force_login(root)

    add = client.post(reverse("admin:receipts_auditentry_add"), {"action": "forged"})
    delete = client.post(reverse("admin:receipts_auditentry_delete", args=[entry.pk]), {"post": "yes"})
    change = client.post(reverse("admin:receipts_auditentry_change", args=[entry.pk]), {"reason": "rewritten"})

    assert (add.status_code, delete.status_code, change.status_code) == (403, 403, 403)
    assert AuditEntry.objects.get().reason == entry.reason
    assert client.get(reverse("admin:receipts_auditentry_changelist")).status_code == 200
