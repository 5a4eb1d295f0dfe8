"""Limits in the admin: only `change_limits` may change them; every change is a version and an audit entry."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group

from agents.contracts import install_team_contracts
from agents.models import LimitsVersion
from receipts.models import AuditEntry

ADD_URL = "/admin/agents/limitsversion/add/"
PREVIEW_URL = "/admin/agents/limitsversion/preview/"


@pytest.fixture
def world(db):
    install_team_contracts()
    Group.objects.get_or_create(name="ops-lead")
    return LimitsVersion.current()


def _staff(django_user_model, name: str, role: str):
    user = django_user_model.objects.create_user(username=name, password="pw-for-tests-only-1", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def admin_user_(django_user_model, world):
    """In the admin group: holds receipts.change_limits."""
    return _staff(django_user_model, "alex", "admin")


@pytest.fixture
def operator(django_user_model, world):
    """Staff, in the operator group: no change_limits."""
    return _staff(django_user_model, "oona", "operator")


def _document(**sales) -> str:
    document = LimitsVersion.current().document
    document = {**document, "agents": {**document.get("agents", {}), "sales": sales}}
    return json.dumps(document)


def _post_new(client, document: str, note: str = "tighter sales"):
    return client.post(ADD_URL, {"document": document, "note": note})


def test_an_admin_change_creates_a_version_and_an_audit_entry(client, admin_user_, world):
    client.force_login(admin_user_)

    response = _post_new(client, _document(tool_call_limit={"run_limit": 1}))

    assert response.status_code == 302
    current = LimitsVersion.current()
    assert (current.number, current.created_by, current.note) == (world.number + 1, admin_user_, "tighter sales")
    assert current.document["agents"]["sales"] == {"tool_call_limit": {"run_limit": 1}}
    entry = AuditEntry.objects.get(action="limits.change")
    assert (entry.actor, entry.outcome, entry.object_id) == (admin_user_, "done", str(current.number))
    assert entry.detail["changed"] == ["agents.sales.tool_call_limit.run_limit"]


def test_an_invalid_change_is_refused_with_its_message_and_saves_nothing(client, admin_user_, world):
    client.force_login(admin_user_)

    response = _post_new(client, _document(tool_call_limit={"run_limit": 50}))

    assert response.status_code == 200
    assert (
        "agents.sales.tool_call_limit.run_limit: run_limit (50) cannot exceed thread_limit (20)"
        in response.content.decode()
    )
    assert LimitsVersion.current() == world
    assert not AuditEntry.objects.filter(action="limits.change").exists()


def test_an_owner_that_does_not_exist_is_refused(client, admin_user_, world):
    client.force_login(admin_user_)

    response = _post_new(client, _document(approval={"owner": "ghost"}))

    assert "agents.sales.approval.owner: no user or group named &#x27;ghost&#x27;" in response.content.decode()
    assert LimitsVersion.current() == world


def test_a_user_without_change_limits_is_denied_and_the_attempt_is_audited(client, operator, world):
    client.force_login(operator)

    response = _post_new(client, _document(tool_call_limit={"run_limit": 1}))

    assert response.status_code == 403
    assert LimitsVersion.current() == world
    entry = AuditEntry.objects.get(action="limits.change")
    assert (entry.actor, entry.outcome) == (operator, "denied")


def test_a_user_without_change_limits_cannot_roll_back(client, operator, world):
    client.force_login(operator)

    response = client.post(f"/admin/agents/limitsversion/{world.pk}/rollback/")

    assert response.status_code == 403
    assert AuditEntry.objects.get(action="limits.rollback").outcome == "denied"


def test_rolling_back_saves_the_old_version_as_new(client, admin_user_, world):
    client.force_login(admin_user_)
    _post_new(client, _document(tool_call_limit={"run_limit": 1}))

    response = client.post(f"/admin/agents/limitsversion/{world.pk}/rollback/")

    current = LimitsVersion.current()
    assert response.status_code == 302
    assert (current.number, current.rolled_back_from, current.document) == (
        world.number + 2,
        world.number,
        world.document,
    )
    assert AuditEntry.objects.get(action="limits.rollback").outcome == "done"


def test_the_diff_page_shows_the_changed_setting(client, admin_user_, world):
    client.force_login(admin_user_)
    _post_new(client, _document(tool_call_limit={"run_limit": 1}))

    response = client.get(f"/admin/agents/limitsversion/{LimitsVersion.current().pk}/diff/")

    page = response.content.decode()
    assert response.status_code == 200
    assert "agents.sales.tool_call_limit.run_limit" in page
    assert "Compared with v1" in page


def test_the_rollback_page_shows_what_would_change(client, admin_user_, world):
    client.force_login(admin_user_)
    _post_new(client, _document(tool_call_limit={"run_limit": 1}))

    response = client.get(f"/admin/agents/limitsversion/{world.pk}/rollback/")

    assert response.status_code == 200
    assert "agents.sales.tool_call_limit.run_limit" in response.content.decode()


def test_the_preview_shows_the_next_runs_stack_in_order(client, admin_user_, world):
    client.force_login(admin_user_)
    _post_new(client, _document(tool_call_limit={"run_limit": 1}))

    response = client.get(PREVIEW_URL, {"agent": "sales", "scenario": "slow_supplier_purchase"})

    page = response.content.decode()
    assert response.status_code == 200
    names = ["ToolErrorMiddleware", "ToolRetryMiddleware", "ToolCallLimitMiddleware", "SidewispMiddleware"]
    assert [page.index(f"<strong>{name}</strong>") for name in names] == sorted(
        page.index(f"<strong>{name}</strong>") for name in names
    )
    assert "<code>run_limit</code> = <code>1</code>" in page
    assert f"gets v{LimitsVersion.current().number}" in page


def test_the_add_form_starts_from_the_current_version(client, admin_user_, world):
    client.force_login(admin_user_)

    page = client.get(ADD_URL).content.decode()

    assert "&quot;tool_call_limit&quot;" in page


def test_a_version_page_shows_its_changes_and_cannot_be_edited(client, admin_user_, world):
    client.force_login(admin_user_)
    _post_new(client, _document(tool_call_limit={"run_limit": 1}))
    current = LimitsVersion.current()

    page = client.get(f"/admin/agents/limitsversion/{current.pk}/change/").content.decode()
    refused = client.post(f"/admin/agents/limitsversion/{current.pk}/change/", {"document": "{}", "note": "x"})

    assert "agents.sales.tool_call_limit.run_limit" in page
    assert f"Roll back to {current}" in page
    assert refused.status_code == 403
    assert LimitsVersion.objects.get(pk=current.pk).document == current.document


def test_the_admin_index_lists_limits_under_agents(client, admin_user_, world):
    client.force_login(admin_user_)

    page = client.get("/admin/").content.decode()

    assert "/admin/agents/limitsversion/" in page
