"""The run's history in a real browser (issue 21 §1): a retry, a verify again and an edit each add a visible entry with
its result, and the history grows live in a second window.

daphne serves the app and a real Celery worker process drives the demo graph. Personas: ops-lead (an approver,
owner of the waits), oncall (an operator), watcher (a viewer) in the second window.
"""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import wait_until
from tests.e2e.test_live_pages import LIVE_TIMEOUT_MS, PASSWORD, expect, in_db_thread, log_in, wait_live

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

WORK_TIMEOUT_MS = LIVE_TIMEOUT_MS * 6


def _people() -> None:
    from django.contrib.auth import get_user_model

    from agents.demo.contracts import install_team_contracts
    from receipts.org.roles import ensure_groups

    install_team_contracts()
    groups = ensure_groups()
    for username, role in (("ops-lead", "approver"), ("oncall", "operator"), ("watcher", "viewer")):
        user = get_user_model().objects.create_user(username=username, password=PASSWORD)
        user.groups.set([groups[role]])


def _started(scenario: str) -> int:
    """A demo run of `scenario` the worker started and that now waits for ops-lead."""

    def _setup() -> int:
        from agents import tasks
        from agents.demo.scenarios import create_run

        _people()
        run = create_run(scenario)
        tasks.start_run.delay(run.pk)
        return run.pk

    run_id = in_db_thread(_setup)
    wait_until(lambda: _value(run_id, "status") == "waiting", what="the run to wait for approval")
    return run_id


def _value(run_id: int, field: str):
    from receipts.models import Run

    return in_db_thread(lambda: Run.objects.values_list(field, flat=True).get(pk=run_id))


def _verdict(run_id: int) -> str:
    from receipts.models import Handoff

    return in_db_thread(lambda: Handoff.objects.values_list("verdict", flat=True).get(run_id=run_id))


def _handoff(run_id: int) -> int:
    from receipts.models import Handoff

    return in_db_thread(lambda: Handoff.objects.values_list("pk", flat=True).get(run_id=run_id))


def _entry_of(page, action: str):
    return page.locator(".history-entry[data-kind=audit]", has_text=f"{action}").first


def _second_window(chromium_browser, server, run_id: int):
    context = chromium_browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = context.new_page()
    log_in(watcher, server, "watcher")
    watcher.goto(f"{server.url}/runs/{run_id}/")
    wait_live(watcher)
    return context, watcher


def test_an_edit_adds_an_entry_naming_the_changed_argument_and_its_result_live_in_a_second_window(
    worker_process, action_server, browser_page, browser
):
    page, server = browser_page, action_server
    run_id = _started("waiting_on_approval")
    context, watcher = _second_window(browser, server, run_id)
    expect(watcher.locator(f"#run-{run_id}-history")).not_to_contain_text("wait.edit")

    log_in(page, server, "ops-lead")
    page.goto(f"{server.url}/confirm/edit/{_handoff(run_id)}/")
    page.fill("[name=arg_quantity]", "3")
    page.fill("[name=reason]", "three are enough")
    page.locator("button[data-confirm=edit]").click()
    expect(page.locator("#result-title")).to_have_text("Done")
    page.get_by_role("link", name="See this action in the run's history").click()
    entry = _entry_of(page, "wait.edit")
    expect(entry).to_contain_text("ops-lead: wait.edit — Done")
    expect(entry).to_contain_text("changed arguments: quantity")

    live = _entry_of(watcher, "wait.edit")  # no reload: the socket swapped the section in
    expect(live).to_contain_text("why: three are enough", timeout=LIVE_TIMEOUT_MS)
    expect(live.locator("[data-result]")).to_contain_text("ran the resume", timeout=WORK_TIMEOUT_MS)
    expect(live.locator("[data-result]")).to_contain_text("complete", timeout=WORK_TIMEOUT_MS)
    context.close()


def test_a_verify_again_adds_an_entry_with_its_re_verification_and_verdict(
    worker_process, action_server, browser_page, browser
):
    from receipts import actions

    page, server = browser_page, action_server
    run_id = _started("false_claim_after_rejection")

    def _reject() -> None:
        from django.contrib.auth import get_user_model

        from receipts.models import Handoff

        owner = get_user_model().objects.get(username="ops-lead")
        wait = Handoff.objects.get(run_id=run_id)
        token = wait.wait_part["resume_token_id"]
        found = actions.decide(
            user=owner, handoff_id=wait.pk, kind="reject", token=token, key=uuid.uuid4().hex, reason="over budget"
        )
        return found.outcome

    assert in_db_thread(_reject) == "done"
    wait_until(lambda: _verdict(run_id) == "FALSE_COMPLETE", what="the false claim")
    context, watcher = _second_window(browser, server, run_id)

    log_in(page, server, "oncall")
    page.goto(f"{server.url}/confirm/verify/{_handoff(run_id)}/")
    page.fill("[name=reason]", "the customer says there is no order")
    page.locator("button[data-confirm=verify]").click()
    expect(page.locator("#result-title")).to_have_text("Done")
    page.get_by_role("link", name="See this action in the run's history").click()
    expect(_entry_of(page, "task.verify")).to_contain_text("oncall: task.verify — Done")

    live = _entry_of(watcher, "task.verify")
    expect(live.locator("[data-result]")).to_contain_text("ran the reverify", timeout=WORK_TIMEOUT_MS)
    expect(live.locator("[data-result]")).to_contain_text("fail, verdict False complete", timeout=WORK_TIMEOUT_MS)
    context.close()


def test_a_retry_adds_an_entry_with_the_new_attempt_and_how_it_ended(
    worker_process, action_server, browser_page, browser
):
    page, server = browser_page, action_server

    def _parked() -> int:
        from agents.demo.scenarios import create_run
        from receipts.models import Run

        _people()
        run = create_run("waiting_on_approval")  # never started: parked before its first step
        Run.objects.filter(pk=run.pk).update(status=Run.Status.PARKED)
        return run.pk

    run_id = in_db_thread(_parked)
    context, watcher = _second_window(browser, server, run_id)

    log_in(page, server, "oncall")
    page.goto(f"{server.url}/confirm/retry/{run_id}/")
    page.fill("[name=reason]", "the worker was restarted")
    page.locator("button[data-confirm=retry]").click()
    expect(page.locator("#result-title")).to_have_text("Done")
    page.get_by_role("link", name="See this action in the run's history").click()
    expect(_entry_of(page, "run.retry")).to_contain_text("status before: parked")

    live = _entry_of(watcher, "run.retry")
    expect(live.locator("[data-result]")).to_contain_text("ran the start (attempt 1", timeout=WORK_TIMEOUT_MS)
    expect(live.locator("[data-result]")).to_contain_text("waiting", timeout=WORK_TIMEOUT_MS)
    expect(watcher.locator(".history-entry[data-kind=delivery]").first).to_contain_text("to worker")
    context.close()
