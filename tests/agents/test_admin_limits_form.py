"""The limits as a form in the admin: a field per setting of the schema, a diff before saving, errors on their field."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from django import forms
from django.contrib.auth.models import Group

from agents import limits
from agents.demo.contracts import install_team_contracts
from agents.limits.form import field_name
from agents.models import LimitsVersion
from receipts.models import AuditEntry

SETTINGS_URL = "/admin/agents/limitsversion/settings/"
ADD_URL = "/admin/agents/limitsversion/add/"


@pytest.fixture
def world(db):
    install_team_contracts()
    Group.objects.get_or_create(name="ops-lead")
    return LimitsVersion.current()


@pytest.fixture
def alex(django_user_model, world):
    """Alex administers the team: in the admin group, holds receipts.change_limits."""
    user = django_user_model.objects.create_user(username="alex", password="pw-for-tests-only-1", is_staff=True)
    user.groups.add(Group.objects.get(name="admin"))
    return user


@pytest.fixture
def oona(django_user_model, world):
    """Oona operates runs: staff in the operator group, without change_limits."""
    user = django_user_model.objects.create_user(username="oona", password="pw-for-tests-only-1", is_staff=True)
    user.groups.add(Group.objects.get(name="operator"))
    return user


def _fields(page: str) -> set[str]:
    form = page.split('id="limits-settings-form"', 1)[1].split("</form>", 1)[0]
    return set(re.findall(r'name="([a-z_]+__[a-z_]+|per_tool_limits)"', form))


def _post(client, scope: str, **changed):
    """Post the form as the page shows it, with `changed` fields replaced."""
    page = client.get(SETTINGS_URL, {"scope": scope})
    form = page.context["form"]
    data = {name: form[name].value() for name in form.fields}
    data = {k: ("on" if v is True else "" if v is False or v is None else v) for k, v in data.items()}
    for name, field in form.fields.items():
        if isinstance(field, forms.JSONField):
            data[name] = json.dumps(form[name].initial)
    data.update(changed)
    return client.post(f"{SETTINGS_URL}?scope={scope}", {k: v for k, v in data.items() if v != ""})


def test_the_form_renders_one_field_per_setting_of_the_schema(client, alex):
    client.force_login(alex)

    page = client.get(SETTINGS_URL, {"scope": "agents.sales"}).content.decode()

    assert _fields(page) == {field_name(setting) for setting in limits.schema()}
    assert len(limits.schema()) > 40  # every section's settings, not a hand-picked few
    assert '<select name="tool_call_limit__exit_behavior"' in page
    assert 'type="number" name="tool_call_limit__run_limit" value="8"' in page
    assert "JSON view" in page


def test_a_valid_change_through_the_form_shows_its_diff_and_saves_a_version(client, alex, world):
    client.force_login(alex)

    review = _post(client, "agents.sales", tool_call_limit__run_limit="3", note="tighter sales")

    assert review.status_code == 200, review.context["form"].errors
    page = review.content.decode()
    assert "<code>agents.sales.tool_call_limit.run_limit</code>" in page
    assert LimitsVersion.current() == world  # nothing saved before the review is confirmed
    document = unescape(re.search(r'name="document" value="([^"]*)"', page).group(1))
    saved = client.post(ADD_URL, {"document": document, "note": "tighter sales"})

    assert saved.status_code == 302
    current = LimitsVersion.current()
    assert current.number == world.number + 1
    assert current.document["agents"]["sales"] == {"tool_call_limit": {"run_limit": 3}}
    assert AuditEntry.objects.get(action="limits.change").detail["changed"] == [
        "agents.sales.tool_call_limit.run_limit"
    ]


def test_an_invalid_value_keeps_its_message_on_its_field_and_saves_nothing(client, alex, world):
    client.force_login(alex)

    response = _post(client, "agents.sales", tool_call_limit__run_limit="50")

    assert response.status_code == 400
    form = response.context["form"]
    # issue 30 §5: in words, the field's label for its path and for the other setting it names.
    assert form.errors["tool_call_limit__run_limit"] == [
        "Tool calls per run: the value (50) cannot exceed “Tool calls per conversation” (20)"
    ]
    assert list(form.errors) == ["tool_call_limit__run_limit"]
    page = response.content.decode()
    row = page.split("field-tool_call_limit__run_limit", 1)[1].split("</div>\n    \n", 1)[0]
    assert "cannot exceed “Tool calls per conversation” (20)" in unescape(row)
    assert LimitsVersion.current() == world


def test_a_choice_outside_the_schema_is_refused_on_its_field(client, alex, world):
    client.force_login(alex)

    response = _post(client, "default", model_call_limit__exit_behavior="explode")

    assert response.status_code == 400
    assert list(response.context["form"].errors) == ["model_call_limit__exit_behavior"]


def test_a_tool_list_names_only_tools_the_agent_has(client, alex, world):
    client.force_login(alex)

    response = _post(client, "agents.sales", context_editing__exclude_tools="no_such_tool")

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert list(errors) == ["context_editing__exclude_tools"]
    assert "no_such_tool" in errors["context_editing__exclude_tools"][0]


def test_the_default_scope_writes_into_the_default(client, alex, world):
    client.force_login(alex)

    review = _post(client, "default", approval__deadline_minutes="90")

    assert "<code>default.approval.deadline_minutes</code>" in review.content.decode()


def test_an_operator_cannot_open_the_form_and_the_attempt_is_audited(client, oona, world):
    client.force_login(oona)

    response = client.get(SETTINGS_URL)

    assert response.status_code == 403
    assert AuditEntry.objects.get(action="limits.change").outcome == "denied"


def test_the_schema_reads_every_default_setting_back_unchanged():
    rebuilt: dict = {}
    for setting in limits.schema():
        rebuilt = limits.with_setting(rebuilt, setting, limits.setting_value(limits.DEFAULT_SETTINGS, setting))

    assert rebuilt == limits.DEFAULT_SETTINGS
    assert {s.path: s.kind for s in limits.schema()}["tool_call_limit.exit_behavior"] == "choice"


def test_a_message_lands_on_the_setting_it_names_in_its_own_scope_only():
    settings = limits.schema()

    on = {
        error: getattr(limits.setting_of_error(error, "agents.coder", settings), "path", None)
        for error in (
            "agents.coder.shell.redaction[0].pattern: not a valid regular expression",
            "agents.coder.approval.tools.shell.commands: each entry is one command name",
            "agents.coder.per_tool_limits.refund: coder has no tool 'refund'",
            "agents.coder.tool_call_limit: at least one limit must be specified",
            "agents.sales.shell.enabled: must be true or false",
            "default.shell.enabled: must be true or false",
        )
    }

    assert list(on.values()) == ["shell.redaction", "approval.tools", "per_tool_limits", None, None, None]
