"""Decisions as an operator sees them in a real browser: a declined order judged honestly, resolved waits
without a countdown, and the owner's confirmation page showing what the agent asked for."""

from __future__ import annotations

import pytest

from tests.e2e.test_live_pages import PASSWORD, expect, in_db_thread, log_in, shoot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


def _waiting_run(scenario: str = "waiting_on_approval", decision: dict | None = None) -> tuple[int, int]:
    """A real run of `scenario` driven in-process to its wait (and resumed with `decision`): (run pk, wait pk)."""

    def _setup() -> tuple[int, int]:
        from django.contrib.auth import get_user_model

        from agents.demo.contracts import install_team_contracts
        from agents.demo.scenarios import create_run
        from agents.host import runner
        from receipts.org.roles import ensure_groups

        install_team_contracts()
        groups = ensure_groups()
        user = get_user_model().objects.create_user(username="ops-lead", password=PASSWORD)
        user.groups.set([groups["approver"]])
        run = create_run(scenario)
        runner.start_run(run)
        if decision is not None:
            runner.resume_run(run, decision)
        return run.pk, run.handoffs.get().pk

    return in_db_thread(_setup)


def test_a_rejected_run_that_says_so_is_not_a_false_completion_on_its_page(action_server, browser_page):
    page, server = browser_page, action_server
    run_pk, wait_pk = _waiting_run(decision={"type": "reject", "message": "over budget"})
    log_in(page, server, "ops-lead")

    page.goto(f"{server.url}/runs/{run_pk}/")

    card = page.locator(f"#handoff-{wait_pk}")
    expect(card.locator("[data-verdict]").first).to_have_attribute("data-verdict", "HEALTHY")
    expect(card.locator("[data-resolution]")).to_contain_text("Rejected")
    expect(card).not_to_contain_text("Reopen")
    shoot(page, "decisions-rejected-run")


def test_a_resolved_wait_shows_no_countdown(action_server, browser_page):
    page, server = browser_page, action_server
    run_pk, _ = _waiting_run(decision={"type": "approve"})
    log_in(page, server, "ops-lead")

    for url in (f"/runs/{run_pk}/", "/waits/"):
        page.goto(f"{server.url}{url}")
        resolved = page.locator("[data-resolved]").first
        expect(resolved).to_contain_text("Approved")
        page.wait_for_timeout(1200)  # a countdown would have ticked by now
        expect(page.locator("[data-resolved] time.countdown")).to_have_count(0)
        expect(page.locator("body")).not_to_contain_text("due in")
        expect(page.locator("body")).not_to_contain_text("overdue by")


def test_the_confirm_page_shows_the_owner_the_pending_calls_values(action_server, browser_page):
    page, server = browser_page, action_server
    _, wait_pk = _waiting_run()
    log_in(page, server, "ops-lead")

    page.goto(f"{server.url}/confirm/approve/{wait_pk}/")

    values = page.locator("[data-arg-values]")
    expect(values.locator('[data-arg="sku"] td')).to_have_text("server")
    expect(values.locator('[data-arg="quantity"] td')).to_have_text("1")
    expect(page.locator("[data-wait-context]")).to_contain_text("triage → sales")
    shoot(page, "decisions-confirm-values")
