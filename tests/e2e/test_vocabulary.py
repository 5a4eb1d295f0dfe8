"""One vocabulary and an admin that guides, in real Chromium (issue 30 §4, §5): a verdict badge lands on its
glossary entry, the Admin link is for staff admins only, an invalid admin form opens with a summary whose links
reach their fields, and the glossary and the admin forms have no axe-core WCAG 2 A/AA violation."""

from __future__ import annotations

import importlib

import pytest

from tests.e2e.conftest import PEOPLE, axe_violations
from tests.e2e.test_live_pages import expect, in_db_thread

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


def _make_staff(*roles: str) -> None:
    from django.contrib.auth import get_user_model

    get_user_model().objects.filter(username__in=[PEOPLE[role] for role in roles]).update(is_staff=True)


def _default_rule() -> int:
    from django.apps import apps
    from django.contrib.auth.models import Group

    from receipts.models import AlertRule

    Group.objects.get_or_create(name="ops-lead")  # the default approval owner, for the limits form
    importlib.import_module("receipts.migrations.0034_default_alert_rules").add_defaults(apps, None)
    return AlertRule.objects.get(kind="window").pk


def test_a_verdict_badge_lands_on_its_glossary_entry(open_as, people_server):
    page = open_as("viewer")
    page.goto(f"{people_server.url}/runs/{people_server.seeded.long_verdict_run}/")

    page.locator("a.verdict-link:has([data-verdict='DESTINATION_NOT_STARTED'])").first.click()

    page.wait_for_url("**/glossary/#verdict-destination-not-started")
    entry = page.locator("#verdict-destination-not-started")
    expect(entry).to_be_in_viewport()
    expect(entry).to_contain_text("Destination not started")
    expect(entry.locator("[data-next-move]")).to_have_text("inspect routing and node permissions")
    assert page.evaluate("document.querySelector(':target').id") == "verdict-destination-not-started"


def test_the_admin_link_is_shown_to_staff_admins_only(open_as, people_server):
    in_db_thread(_make_staff, "admin", "operator")
    admin, operator, viewer = open_as("admin"), open_as("operator"), open_as("viewer")

    for page in (operator, viewer):
        page.goto(f"{people_server.url}/")
        expect(page.locator("nav[aria-label=Main]")).to_contain_text("Glossary")
        expect(page.locator("[data-admin-link]")).to_have_count(0)
    admin.goto(f"{people_server.url}/")
    admin.locator("nav[aria-label=Main] >> text=Admin").click()

    expect(admin.locator("#site-name")).to_have_text("Sidewisp administration")


def test_an_invalid_limits_form_opens_with_a_summary_whose_links_reach_their_fields(open_as, people_server):
    in_db_thread(_make_staff, "admin")
    in_db_thread(_default_rule)
    page = open_as("admin")
    page.goto(f"{people_server.url}/admin/agents/limitsversion/settings/?scope=agents.sales")
    page.fill("#id_tool_call_limit__run_limit", "50")  # above the agent's thread limit (20)

    page.click("#limits-settings-form input[type=submit]")

    summary = page.locator("#error-summary")
    expect(summary).to_contain_text("1 field to correct")
    summary.locator("a", has_text="Tool calls per run").click()
    expect(page.locator("#id_tool_call_limit__run_limit")).to_be_focused()
    assert axe_violations(page) == []


def test_an_invalid_wait_reason_row_shows_its_words_on_the_row_and_in_the_summary(open_as, people_server):
    in_db_thread(_make_staff, "admin")
    in_db_thread(_default_rule)
    page = open_as("admin")
    page.goto(f"{people_server.url}/admin/receipts/contractversion/add/")
    blank = page.locator("input[name^='wait_reasons-'][name$='-code']:not([readonly])").first
    row = blank.get_attribute("name").removesuffix("-code")
    page.fill(f"input[name='{row}-description']", "Visit first")  # a meaning without its code

    page.click("input[name=_save]")

    summary = page.locator("#error-summary")
    expect(summary).to_contain_text("has no code")
    expect(page.locator(f"#id_{row}-error")).to_contain_text("“Visit first” has no code")
    expect(page.locator(f"input[name='{row}-code']")).to_have_attribute("aria-invalid", "true")
    summary.locator("a", has_text="Wait reasons").click()
    expect(page.locator("#id_wait_reasons")).to_be_in_viewport()
    assert axe_violations(page) == []


def test_the_glossary_and_the_admin_forms_have_no_wcag_violation(open_as, people_server):
    in_db_thread(_make_staff, "admin")
    rule = in_db_thread(_default_rule)
    page = open_as("admin")
    found = []
    for path in (
        "/glossary/",
        "/admin/receipts/contractversion/add/",
        "/admin/agents/limitsversion/settings/?scope=default",
        "/admin/receipts/alertrule/add/",
        f"/admin/receipts/alertrule/{rule}/change/",
    ):
        page.goto(people_server.url + path)
        expect(page.locator("h1").first).to_be_visible()
        found += [f"{path}: {v['id']} ({v['help']}) at {v['targets']}" for v in axe_violations(page)]
    page.goto(f"{people_server.url}/admin/receipts/contractversion/add/")
    page.fill("#id_document", '{"routes": {"a": }}')
    page.click("input[name=_save]")
    expect(page.locator("#error-summary")).to_contain_text("line 1, column 18")
    found += [f"invalid contract form: {v['id']} ({v['help']}) at {v['targets']}" for v in axe_violations(page)]

    assert found == []
