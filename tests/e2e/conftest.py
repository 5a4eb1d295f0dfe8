"""Browser fixtures shared by the phone-layout and accessibility tests.

`people_server` is daphne on the test database with one user per role and a
handful of handoffs in every state a page can show; `axe_violations(page)`
runs the vendored axe-core (WCAG 2 A and AA rules) in the page.
"""

from __future__ import annotations

from collections.abc import Iterator
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


@pytest.fixture
def people_server(transactional_db, celery_isolation, monkeypatch):
    """daphne on the test database, one person per role, and the handoffs of `seed_pages`."""
    from tests.e2e.test_live_pages import Server, in_db_thread

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # only for fixture teardown beside Playwright
    seeded = in_db_thread(seed_pages)
    live = Server(celery_isolation)
    live.start()
    live.seeded = seeded
    yield live
    live.stop()


@pytest.fixture
def chromium() -> Iterator:
    from tests.e2e.test_live_pages import CHROMIUM, CHROMIUM_ARGS, playwright_sync

    with playwright_sync.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def open_as(chromium, people_server):
    """open_as("operator", viewport=PHONE): a logged-in page of a fresh context (CSP bypassed for axe only)."""
    from tests.e2e.test_live_pages import PASSWORD

    contexts = []

    def _open(role: str | None, *, viewport: dict = DESKTOP):
        context = chromium.new_context(viewport=viewport, timezone_id="Europe/Berlin", bypass_csp=True)
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
