"""Informed approvals: the owner sees the pending call's values (redacted), a viewer does not, nothing keeps them;
an edit the tool's schema refuses is an error next to its field."""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse
from sidewisp_agent.arguments import PATH_MARK, redacted_values

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import runner
from agents.limits import DEFAULT_SETTINGS
from receipts.ingest import broadcast
from receipts.models import AuditEntry, Decision, Receipt


@pytest.fixture(autouse=True)
def contracts(transactional_db):
    install_team_contracts()


@pytest.fixture
def events(monkeypatch):
    published: list[dict] = []
    monkeypatch.setattr(broadcast, "publish", lambda event: published.append(event) or True)
    return published


@pytest.fixture
def viewer(person):
    return person("watcher", "viewer")


@pytest.fixture
def wait(events):
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    return run.handoffs.get()


def _confirm(client, user, what, wait):
    client.force_login(user)
    return client.get(reverse("sidewisp:confirm", args=[what, wait.pk]))


def test_the_owner_sees_the_pending_calls_values_and_where_the_wait_came_from(client, owner, wait):
    page = _confirm(client, owner, "approve", wait).content.decode()

    assert '<tr data-arg="sku"><th scope="row"><code>sku</code></th><td><code>server</code></td></tr>' in page
    assert '<tr data-arg="quantity"><th scope="row"><code>quantity</code></th><td><code>1</code></td></tr>' in page
    assert 'triage <span aria-label="to">→</span> sales' in page and "(routes/1)" in page
    assert wait.handoff_id in page and "data-open-for" in page


def test_a_viewer_sees_no_values(client, viewer, wait):
    response = _confirm(client, viewer, "approve", wait)

    assert response.status_code == 403
    assert "server" not in response.content.decode()


def test_the_values_are_in_no_receipt_event_or_audit_entry(client, owner, wait, events, monkeypatch):
    from agents import tasks

    monkeypatch.setattr(tasks.resume_run, "delay", lambda pk: None)
    _confirm(client, owner, "approve", wait)
    data = {"decision": "approve", "token": wait.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), data)
    runner.resume_run(wait.run, Decision.objects.get().as_resume())

    kept = [
        *Receipt.objects.values_list("payload", flat=True),
        *AuditEntry.objects.values_list("detail", "reason"),
        *events,
        wait.run.__class__.objects.get(pk=wait.run_id).pending_call,
    ]
    assert "server" not in str(kept)


def test_values_pass_through_the_shell_redaction_rules_and_lose_absolute_paths():
    shown = redacted_values(
        {"note": "api_key=abc123secret", "file": "/home/ops/.ssh/id_rsa", "n": 3},
        DEFAULT_SETTINGS["shell"]["redaction"],
    )

    assert "abc123secret" not in shown["note"]
    assert shown["file"] == PATH_MARK and shown["n"] == "3"


def test_an_edit_outside_the_tools_range_is_an_error_next_to_its_field_and_spends_nothing(client, owner, wait):
    client.force_login(owner)
    data = {"decision": "edit", "token": wait.wait_part["resume_token_id"], "key": uuid.uuid4().hex}

    response = client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), {**data, "arg_quantity": "-999999"})

    page = response.content.decode()
    assert response.status_code == 400
    field = page.index('name="arg_quantity"')
    assert page.index("Must be between 1 and 100.") > field
    assert "A whole number from 1 to 100" in page
    assert not Decision.objects.exists()


def test_a_resolved_wait_shows_who_decided_what_and_no_countdown(client, owner, wait, monkeypatch):
    from agents import tasks

    monkeypatch.setattr(tasks.resume_run, "delay", lambda pk: None)
    client.force_login(owner)
    data = {"decision": "reject", "token": wait.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), {**data, "reason": "over budget"})
    runner.resume_run(wait.run, Decision.objects.get().as_resume())

    run_page = client.get(reverse("sidewisp:run-detail", args=[wait.run_id])).content.decode()
    waits_page = client.get(reverse("sidewisp:waits")).content.decode()
    for page in (run_page, waits_page):
        assert 'data-resolution="rejected"' in page and "by ops-lead" in page and "open for" in page
        assert "countdown" not in page
