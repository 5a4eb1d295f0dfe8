"""An approver approves a real waiting run from the inbox in a real browser and watches it continue, live.

daphne serves the app, a real Celery worker process runs the graph (start and
resume), and the browser sees the resumed run complete through the socket.
"""

from __future__ import annotations

import pytest

from tests.conftest import wait_until
from tests.e2e.test_live_pages import (
    LIVE_TIMEOUT_MS,
    PASSWORD,
    csp_errors,
    expect,
    in_db_thread,
    log_in,
    shoot,
    wait_live,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def waiting_run(worker_process) -> int:
    """A real waiting_on_approval run, started by the worker and now waiting for ops-lead."""

    def _setup() -> int:
        from django.contrib.auth import get_user_model

        from agents import tasks
        from agents.demo.contracts import install_team_contracts
        from agents.demo.scenarios import create_run
        from receipts.org.roles import ensure_groups

        install_team_contracts()
        groups = ensure_groups()
        for username, role in (("ops-lead", "approver"), ("watcher", "viewer")):
            user = get_user_model().objects.create_user(username=username, password=PASSWORD)
            user.groups.set([groups[role]])
        run = create_run("waiting_on_approval")
        tasks.start_run.delay(run.pk)
        return run.pk

    run_id = in_db_thread(_setup)
    wait_until(lambda: _status(run_id) == "waiting", what="the run to wait for approval")
    return run_id


def _status(run_id: int) -> str:
    from receipts.models import Run

    return in_db_thread(lambda: Run.objects.values_list("status", flat=True).get(pk=run_id))


def _wait_pk(run_id: int) -> int:
    from receipts.models import Handoff

    return in_db_thread(lambda: Handoff.objects.values_list("pk", flat=True).get(run_id=run_id))


def test_an_approver_approves_a_wait_from_the_inbox_and_sees_the_run_continue_live(
    waiting_run, action_server, browser_page
):
    page, server = browser_page, action_server
    wait_pk = _wait_pk(waiting_run)
    log_in(page, server, "ops-lead")
    page.goto(f"{server.url}/waits/")
    wait_live(page)
    row = page.locator(f"#wait-{wait_pk}")
    expect(row).to_contain_text("ops-lead")

    row.get_by_role("link", name="Approve…").click()
    what = page.locator(".what-happens")
    expect(what).to_contain_text("place_order")
    expect(what).to_contain_text("quantity")
    expect(what).to_contain_text("server")  # the owner sees the pending call's values (redacted)
    shoot(page, "approve-confirm")
    page.locator("button[data-confirm=approve]").click()

    expect(page.locator("#result-title")).to_have_text("Done")
    wait_live(page)
    run = page.locator(f"#run-{waiting_run}")
    expect(run).to_contain_text("Complete", timeout=LIVE_TIMEOUT_MS * 3)
    expect(page.locator(f"#handoff-{wait_pk}")).to_contain_text("Healthy", timeout=LIVE_TIMEOUT_MS)
    shoot(page, "approve-done-live")

    page.goto(f"{server.url}/waits/")
    expect(page.locator(f"#wait-{wait_pk}")).to_have_count(0)
    assert csp_errors(page) == []


def test_a_viewer_cannot_approve_and_opening_the_page_writes_no_denied_entry(waiting_run, action_server, browser_page):
    page, server = browser_page, action_server
    wait_pk = _wait_pk(waiting_run)
    page.goto(f"{server.url}/login/")
    page.fill("#id_username", "watcher")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")

    page.goto(f"{server.url}/confirm/approve/{wait_pk}/")

    expect(page.locator("#result-title")).to_have_text("Not allowed")

    def denied() -> list:
        from receipts.models import AuditEntry

        return list(AuditEntry.objects.filter(outcome="denied").values_list("actor_name", "action"))

    # Looking is not an attempt (issue "Operator truth"); a refused POST is audited (test_actions_matrix).
    assert in_db_thread(denied) == []
    expect(page.locator("form[action*='approve']")).to_have_count(0)
    assert _status(waiting_run) == "waiting"
