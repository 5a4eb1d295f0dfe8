"""An admin adds a contract version through the real Django admin in a real browser (daphne, headless Chromium).

The admin is a staff user in the admin role group, not a superuser: before the
admin role could add contract versions, this page answered 403.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.test_live_pages import PASSWORD, Server, expect, in_db_thread, shoot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def admin_server(transactional_db, celery_isolation) -> Iterator[Server]:
    """daphne on the test database with the demo contracts and alex, staff in the admin role group.

    A daphne per test, not the module's (tests/e2e/conftest.py `daphne`): a save through the admin logs a
    LogEntry with the model's content type, which Django caches by id per process, and the flush after each
    test makes the content types again under new ids.
    """

    def _setup() -> None:
        from django.contrib.auth import get_user_model

        from agents.demo.contracts import install_team_contracts
        from receipts.org.roles import ensure_groups

        install_team_contracts()
        alex = get_user_model().objects.create_user(username="alex", password=PASSWORD, is_staff=True)
        alex.groups.set([ensure_groups()["admin"]])

    in_db_thread(_setup)
    live = Server(celery_isolation)
    live.start()
    yield live
    live.stop()


# The route rows of the form as [sender, receiver, keys] (the page's own inputs, read in the browser).
ROUTE_ROWS = (
    "[...document.querySelectorAll('#id_routes tbody tr')].map(tr => "
    "[...tr.querySelectorAll('input')].map(input => input.value.trim()))"
)


def routes_in(page) -> dict:
    """The routes the form's rows say, as the JSON document has them."""
    routes: dict = {}
    for sender, receiver, keys in page.evaluate(f"() => {ROUTE_ROWS}"):
        if sender or receiver:
            routes.setdefault(sender, {})[receiver] = [k.strip() for k in keys.split(",") if k.strip()]
    return routes


def _saved(version: str) -> tuple[dict, str] | None:
    from receipts.models import ContractVersion

    found = ContractVersion.objects.select_related("created_by").filter(version=version).first()
    return (found.routes, found.created_by.username) if found else None


def test_an_admin_adds_a_contract_version_after_reviewing_its_route_changes(browser, admin_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{admin_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", "alex")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_have_text("Sidewisp administration")

    page.click("a[href='/admin/receipts/contractversion/add/']")
    expect(page.locator("#id_version")).to_have_value("routes/4")
    # issue 30 §5: the routes are rows; a blank row under them adds one.
    blank = page.evaluate(f"() => {ROUTE_ROWS}.findIndex(row => !row[0] && !row[1])")
    page.fill(f"input[name=routes-{blank}-sender]", "triage")
    page.fill(f"input[name=routes-{blank}-receiver]", "research")
    page.fill(f"input[name=routes-{blank}-keys]", "question")
    page.fill("#id_note", "triage may ask research")
    expect(page.locator("input[name=_addanother], input[name=_continue]")).to_have_count(0)
    page.click("input[name=_save]")

    expect(page.locator("h1")).to_have_text("Review the new contract version routes/4")
    expect(page.locator("#route-changes tbody tr")).to_have_count(1)
    expect(page.locator("#route-changes tbody td")).to_have_text(["triage", "research", "added", "—", "question"])
    assert in_db_thread(_saved, "routes/4") is None
    shoot(page, "admin-contract-review")
    page.click("input[value='Save routes/4']")

    expect(page.locator(".messagelist")).to_contain_text("routes/4")
    expect(page.locator("#result_list")).to_contain_text("triage may ask research")
    saved_routes, created_by = in_db_thread(_saved, "routes/4")
    assert saved_routes["triage"]["research"] == ["question"]
    assert created_by == "alex"
    context.close()


def _routes_of(version: str) -> tuple[int, dict]:
    from receipts.models import ContractVersion

    found = ContractVersion.objects.get(version=version)
    return found.pk, found.routes


def test_choosing_another_based_on_reloads_the_routes_of_that_version(browser, admin_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{admin_server.url}/admin/login/?next=/admin/receipts/contractversion/add/")
    page.fill("#id_username", "alex")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("#id_version")).to_have_value("routes/4")
    first_pk, first_routes = in_db_thread(_routes_of, "routes/1")

    page.select_option("#id_based_on", str(first_pk))

    page.wait_for_url(f"**/admin/receipts/contractversion/add/?from={first_pk}")
    expect(page.locator("#id_based_on")).to_have_value(str(first_pk))
    assert routes_in(page) == first_routes
    context.close()


def _limits() -> tuple[int, dict]:
    from django.contrib.auth.models import Group

    from agents.models import LimitsVersion

    Group.objects.get_or_create(name="ops-lead")  # the default approval owner must exist
    current = LimitsVersion.current()
    return current.number, current.document


def test_an_admin_changes_one_agents_limit_in_the_settings_form(browser, admin_server):
    before, _ = in_db_thread(_limits)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{admin_server.url}/admin/login/?next=/admin/agents/limitsversion/")
    page.fill("#id_username", "alex")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.click("text=Edit as a form")
    page.click("#limits-scopes >> text=agents.sales")

    page.fill("#id_tool_call_limit__run_limit", "50")
    page.click("input[value='Review the change']")
    expect(page.locator(".field-tool_call_limit__run_limit .errorlist")).to_contain_text(
        "Tool calls per run: the value (50) cannot exceed “Tool calls per conversation” (20)"  # in words (issue 30 §5)
    )
    shoot(page, "admin-limits-form-error")
    page.fill("#id_tool_call_limit__run_limit", "3")
    page.click("input[value='Review the change']")
    expect(page.locator("#limits-diff tbody td")).to_have_text(  # the setting in words, its path beside (issue 30)
        ["Agent sales · Tool calls per run agents.sales.tool_call_limit.run_limit", "—", "3"], use_inner_text=True
    )
    page.click("input[value='Save as a new version']")

    expect(page.locator(".messagelist")).to_be_visible()
    after, document = in_db_thread(_limits)
    assert after == before + 1
    assert document["agents"]["sales"] == {"tool_call_limit": {"run_limit": 3}}
    context.close()
