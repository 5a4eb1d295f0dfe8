"""The audit page and its CSV export: operators and admins only, filtered, paginated, spreadsheet-safe."""

from __future__ import annotations

import csv
import io
import uuid

import pytest
from django.urls import reverse

from receipts import actions
from receipts.models import AuditEntry
from receipts.org import audit


@pytest.fixture
def wait(scenario_handoff):
    return scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")


@pytest.fixture
def history(person, wait):
    """The demo story: a viewer tries to approve (denied), then the owner approves (done)."""
    viewer, owner = person("watcher", "viewer"), person("ops-lead", "approver")
    token = wait.wait_part["resume_token_id"]
    for user in (viewer, owner):
        actions.decide(user=user, handoff_id=wait.pk, kind="approve", token=token, key=uuid.uuid4().hex)
    return viewer, owner


@pytest.mark.parametrize(("role", "status"), [("viewer", 403), ("approver", 403), ("operator", 200), ("admin", 200)])
def test_the_audit_page_is_for_operators_and_admins(client, person, role, status):
    client.force_login(person("someone", role))

    assert client.get(reverse("sidewisp:audit")).status_code == status
    assert client.get(reverse("sidewisp:audit-csv")).status_code == status


def test_the_audit_page_shows_the_denied_and_the_allowed_attempt(client, person, history):
    client.force_login(person("oncall", "operator"))

    body = client.get(reverse("sidewisp:audit")).content.decode()

    assert "watcher" in body and "ops-lead" in body
    assert "Denied" in body and "Done" in body


def test_the_audit_page_filters_by_actor_and_outcome(client, person, history):
    client.force_login(person("oncall", "operator"))

    page = client.get(reverse("sidewisp:audit"), {"actor": "watcher", "outcome": "denied"})

    assert [e.actor_name for e in page.context["page_obj"]] == ["watcher"]


def test_the_csv_export_has_the_same_filters(client, person, history):
    client.force_login(person("oncall", "operator"))

    response = client.get(reverse("sidewisp:audit-csv"), {"outcome": "done"})

    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert response["Content-Type"].startswith("text/csv")
    assert rows[0][:3] == ["at", "actor", "action"]
    assert [(r[1], r[2], r[7]) for r in rows[1:]] == [("ops-lead", "wait.approve", "done")]


def test_a_reason_that_looks_like_a_formula_is_not_one_in_the_csv(client, person):
    audit.log(actor=None, action="wait.expire", object_type="handoff", object_id=1, outcome="done", reason="=1+1")
    client.force_login(person("oncall", "operator"))

    response = client.get(reverse("sidewisp:audit-csv"))

    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[1][8] == "'=1+1"


def test_the_audit_page_is_paginated(client, person):
    for n in range(55):
        audit.log(actor=None, action="wait.expire", object_type="handoff", object_id=n, outcome="done")
    client.force_login(person("oncall", "operator"))

    first = client.get(reverse("sidewisp:audit"))
    second = client.get(reverse("sidewisp:audit"), {"page": 2})

    assert len(first.context["page_obj"]) == 50
    assert len(second.context["page_obj"]) == 5
    assert AuditEntry.objects.count() == 55
