"""The browser tests' fixtures: one Chromium and one daphne per module, a clean database per test.

`browser` and `daphne` are started once per module (and per xdist worker) —
their start-up was most of a short page test's time. Each test gets empty
tables, seeds what it reads (`server`: the viewer and the outsider;
`people_server`: one user per role and a handful of handoffs in every state
a page can show; `action_server`: nothing) and opens a browser context of its
own (`page`, `browser_page`, `open_as`). `axe_violations(page)` runs the
vendored axe-core (WCAG 2 A and AA rules) in the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import handoff_parts

AXE = Path(__file__).parent / "vendor" / "axe.min.js"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
# The four roles (receipts.org.roles) as the people who hold them; ops-lead owns the waits.
PEOPLE = {"viewer": "watcher", "operator": "operator", "approver": "ops-lead", "admin": "admin", "outsider": "outsider"}


@pytest.hookimpl(trylast=True)  # after `-m` and `-k` deselected what they leave out
def pytest_collection_modifyitems(config, items) -> None:
    """Browser tests selected but no Chromium: stop before running anything, naming the command that installs it.

    Never a skip: a run that leaves the page tests out is not the suite (`make test` checks first, .ci/run installs).
    """
    from tests.e2e.test_live_pages import CHROMIUM

    if not Path(CHROMIUM).exists() and any(item.get_closest_marker("e2e") for item in items):
        raise pytest.UsageError(
            f"the browser tests (tests/e2e) need Debian's Chromium at {CHROMIUM}: "
            "install it with `sudo apt-get install chromium` (or deselect them with `-m 'not e2e'`)"
        )


@dataclass(frozen=True)
class Seeded:
    """What `seed_pages` recorded: primary keys the tests open pages for."""

    wait: int
    wait_run: int
    false: int
    stale: int
    stale_run: int
    context: int
    context_run: int
    long_verdict_run: int


def seed_pages() -> Seeded:
    """Handoffs in every state the pages show, each with a different verdict (run in the db thread)."""
    from datetime import UTC, datetime, timedelta

    from django.contrib.auth import get_user_model

    from agents.demo.contracts import install_team_contracts
    from receipts.ingest import health
    from receipts.ingest.recording import record
    from receipts.models import Handoff, Run
    from receipts.org import audit
    from receipts.org.roles import ensure_groups
    from tests.e2e.test_live_pages import PASSWORD

    install_team_contracts()
    groups = ensure_groups()
    for role, username in PEOPLE.items():
        user = get_user_model().objects.create_user(username=username, password=PASSWORD)
        user.groups.set([groups[role]] if role in groups else [])

    def _record(handoff_id: str, operation_id: str, parts: list) -> Handoff:
        result = None
        for part, value in parts:
            result = record(handoff_id=handoff_id, operation_id=operation_id, part=part, value=value)
        return result.handoff

    now = datetime.now(UTC)
    _record("h-phone-ok", "op-phone-ok", handoff_parts("healthy"))
    waits = []
    for i, minutes in enumerate((-3, 7, 95)):
        parts = handoff_parts("waiting", deadline=now + timedelta(minutes=minutes))
        parts[3] = ("wait", {**parts[3][1], "owner": "ops-lead", "reason": "purchase_approval"})
        waits.append(_record(f"h-phone-wait-{i}-handoff-with-a-long-id", f"op-phone-wait-{i}", parts))
    false = _record("h-phone-false", "op-phone-false", handoff_parts("false_complete"))
    stale = _record("h-phone-stale", "op-phone-stale", handoff_parts("stale_control"))
    parts = handoff_parts("healthy", sender="triage", receiver="sales")
    parts[1] = ("reduced", {**parts[1][1], "context_keys": parts[1][1]["context_keys"][:1]})
    context = _record("h-phone-context", "op-phone-context", parts[:3])
    # The longest verdict label, on a run with a long operation id: the runs list's widest row. Settled: its
    # destination is no longer due, so the verdict is final (an unsettled one reads "in progress").
    long_run = Run.objects.create(operation_id="op-phone-destination-never-started", thread_id="t-phone-dns")
    Handoff.objects.create(
        handoff_id="h-phone-dns",
        run=long_run,
        sender="triage",
        receiver="sales",
        verdict="DESTINATION_NOT_STARTED",
        settled_at=datetime.now(UTC),
    )
    health.refresh(long_run, publish=False)  # what recording does: the runs list reads the stored summary
    audit.log(actor=None, action="wait.escalate", object_type="handoff", object_id=waits[0].pk, outcome="done")
    return Seeded(
        wait=waits[0].pk,
        wait_run=waits[0].run_id,
        false=false.pk,
        stale=stale.pk,
        stale_run=stale.run_id,
        context=context.pk,
        context_run=context.run_id,
        long_verdict_run=long_run.pk,
    )


# --- one Chromium and one daphne per module, a clean database and a new browser context per test ---


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """One headless Chromium for the module's tests; each test opens contexts of its own (cookies, storage,
    viewport), so no test sees another's login, and closes them.

    Per module, not per session: while Playwright's sync API is open it keeps an asyncio loop running in this
    thread, and Django's ORM refuses to run beside a running loop. The tests reach the database through
    in_db_thread; DJANGO_ALLOW_ASYNC_UNSAFE lets pytest-django's flush after each test run here too (the
    servers and workers the tests start never inherit it: Server and start_worker_process leave it out). A
    module's end closes the browser, so tests of other directories that this process runs next never have
    the loop.
    """
    from tests.e2e.test_live_pages import CHROMIUM, CHROMIUM_ARGS, playwright_sync

    with pytest.MonkeyPatch.context() as patch, playwright_sync.sync_playwright() as p:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def daphne(django_db_setup, celery_isolation) -> Iterator:
    """One daphne for the module's tests, on the test database (a test that stops it gets it started again).

    Each test still starts from empty tables: the server fixtures below seed what the test needs after the
    previous test's flush, and daphne keeps nothing of a test that a later one can see — its pages read the
    database on every request, the contracts' cache checks the database first, and the cache and channel
    layer are in Redis under this process's prefix, as with a daphne per test. Django's ContentType cache
    is the one exception: it keeps ids a flush renews, so a module that saves through the admin (LogEntry
    needs the content type) starts a daphne per test (test_admin.py).
    """
    from tests.e2e.test_live_pages import Server

    live = Server(celery_isolation)
    live.start()
    yield live
    live.stop()


@pytest.fixture
def server(transactional_db, daphne):
    """The module's daphne with the demo contracts, `viewer` (the viewer permission) and `outsider` (none)."""
    from tests.e2e.test_live_pages import in_db_thread, seed_viewer_and_outsider

    in_db_thread(seed_viewer_and_outsider)
    daphne.start()
    return daphne


@pytest.fixture
def people_server(transactional_db, daphne):
    """The module's daphne with one person per role and the handoffs of `seed_pages` (`.seeded`)."""
    from tests.e2e.test_live_pages import in_db_thread

    daphne.seeded = in_db_thread(seed_pages)
    daphne.start()
    return daphne


@pytest.fixture
def action_server(transactional_db, daphne):
    """The module's daphne on empty tables: the test seeds what it needs."""
    daphne.start()
    return daphne


@contextmanager
def desktop_page(browser, *, dialogs_fail: bool) -> Iterator:
    """A desktop page of a fresh context whose console errors are collected (`page.console_errors`)."""
    context = browser.new_context(viewport=DESKTOP, timezone_id="Europe/Berlin")
    page = context.new_page()
    page.console_errors = []
    page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
    if dialogs_fail:
        page.on("dialog", lambda d: pytest.fail(f"a dialog opened: {d.message}"))
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def page(browser, server):
    """A desktop page on the module's server; a dialog fails the test."""
    with desktop_page(browser, dialogs_fail=True) as page:
        yield page


@pytest.fixture
def browser_page(browser, action_server):
    """A desktop page on the action server (its tests confirm the dialogs they open)."""
    with desktop_page(browser, dialogs_fail=False) as page:
        yield page


@pytest.fixture
def open_as(browser, people_server):
    """open_as("operator", viewport=PHONE): a logged-in page of a fresh context (CSP bypassed for axe only)."""
    from tests.e2e.test_live_pages import PASSWORD

    contexts = []

    def _open(role: str | None, *, viewport: dict = DESKTOP):
        context = browser.new_context(viewport=viewport, timezone_id="Europe/Berlin", bypass_csp=True)
        contexts.append(context)
        page = context.new_page()
        if role is not None:
            page.goto(f"{people_server.url}/login/")
            page.fill("#id_username", PEOPLE[role])
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(lambda url: "/login/" not in url)
        return page

    yield _open
    for context in contexts:
        context.close()


def axe_violations(page) -> list[dict]:
    """axe-core's WCAG 2 A/AA violations on the page as it is now, each as {id, help, targets}."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    return page.evaluate(
        """async () => {
            const result = await axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}});
            return result.violations.map(v => ({
                id: v.id, help: v.help, targets: v.nodes.map(n => n.target.join(' ')).slice(0, 5),
            }));
        }"""
    )
