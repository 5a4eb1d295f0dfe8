"""Reopen in a real browser (issue 30 §3): an operator reopens a false completion from the run page and watches
the run go healthy, live.

daphne serves the app and a real Celery worker process drives the demo's false_complete scenario: sales claims
an order it never placed; reopened, it reads which verifier failed, places the order, and the verifier passes.
"""

from __future__ import annotations

import pytest

from tests.conftest import wait_until
from tests.e2e.test_live_pages import LIVE_TIMEOUT_MS, PASSWORD, csp_errors, expect, in_db_thread, log_in

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

WORK_TIMEOUT_MS = LIVE_TIMEOUT_MS * 6


def _false_completion() -> tuple[int, int]:
    def _setup() -> tuple[int, int]:
        from django.contrib.auth import get_user_model

        from agents import tasks
        from agents.demo.contracts import install_team_contracts
        from agents.demo.scenarios import create_run
        from receipts.org.roles import ensure_groups

        install_team_contracts()
        user = get_user_model().objects.create_user(username="oncall", password=PASSWORD)
        user.groups.set([ensure_groups()["operator"]])
        run = create_run("false_complete")
        tasks.start_run.delay(run.pk)
        return run.pk

    run_id = in_db_thread(_setup)
    wait_until(lambda: _verdict(run_id) == "FALSE_COMPLETE", what="the false completion")
    return run_id, in_db_thread(lambda: _handoff(run_id).pk)


def _handoff(run_id: int):
    from receipts.models import Handoff

    return Handoff.objects.filter(run_id=run_id).first()


def _verdict(run_id: int) -> str | None:
    found = in_db_thread(_handoff, run_id)
    return found.verdict if found is not None else None


def test_an_operator_reopens_a_false_completion_from_the_run_page_and_sees_it_go_healthy(
    worker_process, action_server, browser_page
):
    page, server = browser_page, action_server
    run_id, handoff_pk = _false_completion()
    log_in(page, server, "oncall")
    page.goto(f"{server.url}/runs/{run_id}/")
    handoff = page.locator(f"#handoff-{handoff_pk}")
    expect(handoff).to_contain_text("False complete")

    handoff.get_by_role("link", name="Reopen the task…").click()
    expect(page.locator(".what-happens")).to_contain_text("goes back to sales")
    expect(page.locator(".what-happens")).to_contain_text("order_exists: fail")
    page.fill("[name=reason]", "the customer says there is no order")
    page.locator("button[data-confirm=reopen]").click()

    expect(page.locator("#result-title")).to_have_text("Done")
    expect(page.locator(f"#handoff-{handoff_pk}")).to_contain_text("Healthy", timeout=WORK_TIMEOUT_MS)
    page.goto(f"{server.url}/runs/{run_id}/")  # and it stays so on a fresh load
    expect(page.locator(f"#handoff-{handoff_pk}")).to_contain_text("Healthy")
    expect(page.locator(f"#handoff-{handoff_pk}")).not_to_contain_text("Reopen the task…")
    assert csp_errors(page) == []
