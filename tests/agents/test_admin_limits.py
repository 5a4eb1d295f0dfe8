"""Limits in the admin: only `change_limits` may change them; every change is a version and an audit entry."""

from __future__ import annotations

import copy
import json
import re

import pytest
from django.contrib.auth.models import Group

from agents import limits
from agents.demo.contracts import install_team_contracts
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
    assert refused.status_code == 403
    assert LimitsVersion.objects.get(pk=current.pk).document == current.document


def test_the_admin_index_lists_limits_under_agents(client, admin_user_, world):
    client.force_login(admin_user_)

    page = client.get("/admin/").content.decode()

    assert "/admin/agents/limitsversion/" in page


def test_an_old_version_offers_a_roll_back_and_the_current_one_does_not(client, admin_user_, world):
    client.force_login(admin_user_)
    _post_new(client, _document(tool_call_limit={"run_limit": 1}))
    current = LimitsVersion.current()

    old_page = client.get(f"/admin/agents/limitsversion/{world.pk}/change/").content.decode()
    current_page = client.get(f"/admin/agents/limitsversion/{current.pk}/change/").content.decode()
    refused = client.post(f"/admin/agents/limitsversion/{current.pk}/rollback/")

    assert f"Roll back to {world}" in old_page
    assert "Roll back to" not in current_page
    assert refused.status_code == 302
    assert LimitsVersion.current() == current


def test_the_limits_lists_show_iso_8601_times_and_the_add_form_offers_only_save(client, admin_user_, world):
    client.force_login(admin_user_)

    listing = client.get("/admin/agents/limitsversion/").content.decode()
    form = client.get(ADD_URL).content.decode()

    assert world.created_at.isoformat(timespec="seconds") in listing
    assert 'name="_save"' in form
    assert not re.search(r'name="_(addanother|continue)"', form)


# --- limits that would stop every run ------------------------------------------


ZERO_RUN_LIMIT_WARNING = (
    "agents.sales.tool_call_limit.run_limit = 0: every run of sales stops after 0 tool calls: its handoffs never happen"
)


def _digest(page: str) -> str:
    return re.search(r'name="_confirm" value="([0-9a-f]+)"', page).group(1)


def test_a_zero_run_limit_warns_what_it_will_do_and_saves_nothing_yet(client, admin_user_, world):
    client.force_login(admin_user_)

    response = _post_new(client, _document(tool_call_limit={"run_limit": 0}))

    page = response.content.decode()
    assert response.status_code == 200
    assert ZERO_RUN_LIMIT_WARNING in page
    assert 'value="Save anyway"' in page
    assert "agents.sales.tool_call_limit.run_limit" in page[page.index('id="limits-diff"') :]
    assert LimitsVersion.current() == world


def test_a_zero_run_limit_is_saved_after_the_explicit_confirmation(client, admin_user_, world):
    client.force_login(admin_user_)
    document = _document(tool_call_limit={"run_limit": 0})
    review = _post_new(client, document).content.decode()

    response = client.post(ADD_URL, {"document": document, "note": "tighter sales", "_confirm": _digest(review)})

    assert response.status_code == 302
    assert LimitsVersion.current().document["agents"]["sales"] == {"tool_call_limit": {"run_limit": 0}}
    assert AuditEntry.objects.get(action="limits.change").outcome == "done"


def test_a_confirmation_of_another_document_does_not_save(client, admin_user_, world):
    client.force_login(admin_user_)
    review = _post_new(client, _document(tool_call_limit={"run_limit": 0})).content.decode()

    response = client.post(
        ADD_URL, {"document": _document(model_call_limit={"run_limit": 0}), "note": "", "_confirm": _digest(review)}
    )

    assert response.status_code == 200
    assert "agents.sales.model_call_limit.run_limit = 0" in response.content.decode()
    assert LimitsVersion.current() == world


def test_limits_that_stop_no_run_save_without_a_review(client, admin_user_, world):
    client.force_login(admin_user_)

    response = _post_new(client, _document(tool_call_limit={"run_limit": 1}))

    assert response.status_code == 302


TEAM = limits.Checks(
    {
        "triage": {"transfer_to_sales", "transfer_to_support"},
        "sales": {"check_inventory", "place_order", "transfer_to_billing"},
        "billing": {"refund"},
    }
)


def _stoppers(**settings) -> list[str]:
    document = copy.deepcopy(limits.DEFAULT_DOCUMENT)
    for path, value in settings.items():
        *parents, leaf = path.split("__")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return limits.stopping_warnings(document, TEAM)


def test_the_built_in_limits_stop_nothing():
    assert _stoppers() == []


def test_a_zero_thread_limit_in_the_default_warns_once_for_the_agents_it_stops_alike():
    assert _stoppers(default__tool_call_limit__thread_limit=0) == [
        "default.tool_call_limit.thread_limit = 0: every thread of billing stops after 0 tool calls: "
        "its tools never run",
        "default.tool_call_limit.thread_limit = 0: every thread of sales, triage stops after 0 tool calls: "
        "their handoffs never happen",
    ]


def test_a_zero_model_call_limit_warns_that_the_agent_never_answers():
    assert _stoppers(agents__billing__model_call_limit={"run_limit": 0}) == [
        "agents.billing.model_call_limit.run_limit = 0: every run of billing ends before its first model call: "
        "no answer, no handoff"
    ]


def test_a_zero_limit_on_a_handoff_tool_warns_that_the_handoff_never_happens():
    assert _stoppers(agents__triage__per_tool_limits={"transfer_to_sales": {"run_limit": 0}}) == [
        "agents.triage.per_tool_limits.transfer_to_sales.run_limit = 0: in every run of triage, "
        "its handoff transfer_to_sales never happens"
    ]


def test_no_model_retry_that_fails_the_run_warns():
    warnings = _stoppers(default__model_retry__max_retries=0, default__model_retry__on_failure="error")

    assert warnings == [
        "default.model_retry.max_retries = 0 with on_failure “error”: one failed model call ends a run of "
        "billing, sales, triage"
    ]


def test_no_model_retry_that_continues_does_not_warn():
    assert _stoppers(default__model_retry__max_retries=0) == []


def test_a_diff_names_each_setting_in_words_beside_its_path(client, admin_user_, world):
    """The form's user reads labels (issue 30 §5): the review of a change says which agent and which setting in
    words, and keeps the document's path beside it for whoever edits the JSON."""
    client.force_login(admin_user_)
    _post_new(client, _document(tool_call_limit={"run_limit": 1}))

    page = client.get(f"/admin/agents/limitsversion/{LimitsVersion.current().pk}/diff/").content.decode()

    row = page[page.index('id="limits-diff"') :]
    assert "Agent sales · Tool calls per run" in row
    assert row.index("Agent sales · Tool calls per run") < row.index("agents.sales.tool_call_limit.run_limit")
