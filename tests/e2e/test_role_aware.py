"""Role-aware pages in a real browser: a viewer is offered nothing, and nothing is offered that cannot work.

daphne serves the app on the test database; the pages stay live over their socket, so each check waits
for the socket's snapshot (which re-renders the fragments for the same user) before it counts links.
"""

from __future__ import annotations

import pytest

from tests.conftest import handoff_parts
from tests.e2e.test_live_pages import PASSWORD, expect, in_db_thread, record_parts, wait_live

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

PEOPLE = {"watcher": "viewer", "ops-lead": "approver", "oncall": "operator"}


def _people() -> None:
    from django.contrib.auth import get_user_model

    from receipts.org.roles import ensure_groups

    groups = ensure_groups()
    for username, role in PEOPLE.items():
        get_user_model().objects.create_user(username=username, password=PASSWORD).groups.set([groups[role]])


@pytest.fixture
def seeded(server) -> dict[str, int]:
    """People of each role; an open wait of ops-lead, a false completion and a stale-control run."""
    in_db_thread(_people)
    wait_parts = handoff_parts("waiting")
    wait_parts[3] = ("wait", {**wait_parts[3][1], "owner": "ops-lead"})
    return {
        "wait": record_parts("h-role-wait", "op-role-wait", wait_parts),
        "false": record_parts("h-role-false", "op-role-false", handoff_parts("false_complete")),
        "stale": record_parts("h-role-stale", "op-role-stale", handoff_parts("stale_control")),
    }


def _run_of(handoff_pk: int) -> int:
    from receipts.models import Handoff

    return in_db_thread(lambda: Handoff.objects.values_list("run_id", flat=True).get(pk=handoff_pk))


def _log_in(page, server, username: str) -> None:
    page.goto(f"{server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Overview")


def test_a_viewer_sees_no_action_link_on_any_page(page, server, seeded):
    _log_in(page, server, "watcher")
    paths = ["/", "/waits/", "/false-completions/", *(f"/runs/{_run_of(pk)}/" for pk in seeded.values())]

    for path in paths:
        page.goto(f"{server.url}{path}")
        wait_live(page)  # the socket's snapshot re-renders the fragments: they must offer nothing either
        expect(page.locator("main a.action")).to_have_count(0)
        expect(page.locator("main a[href*='/confirm/']")).to_have_count(0)


def test_the_confirm_page_of_a_decided_wait_shows_the_decision_and_no_approve_form(page, server, seeded):
    def _decide() -> None:
        from django.contrib.auth import get_user_model

        from receipts.models import Decision, Handoff

        wait = Handoff.objects.select_related("run").get(pk=seeded["wait"])
        Decision.objects.create(
            run=wait.run,
            handoff=wait,
            resume_token_id=wait.wait_part["resume_token_id"],
            kind="approve",
            decided_by=get_user_model().objects.get(username="ops-lead"),
        )

    in_db_thread(_decide)
    _log_in(page, server, "ops-lead")

    page.goto(f"{server.url}/confirm/approve/{seeded['wait']}/")

    expect(page.locator("h1")).to_have_text("Already decided")
    expect(page.locator("[data-decided=approve]")).to_contain_text("by ops-lead")
    expect(page.locator("button[data-confirm=approve]")).to_have_count(0)
    expect(page.locator("form.action-form")).to_have_count(0)


def test_stop_and_resume_are_not_offered_on_a_finished_run(page, server, seeded):
    from receipts.models import Run

    run_id = _run_of(seeded["stale"])
    in_db_thread(lambda: Run.objects.filter(pk=run_id).update(status=Run.Status.COMPLETE))
    _log_in(page, server, "oncall")

    page.goto(f"{server.url}/runs/{run_id}/")
    wait_live(page)

    actions = page.locator(f"#run-{run_id}-actions")
    expect(actions.get_by_role("link", name="Stop auto-continue…")).to_have_count(0)
    expect(actions.locator("a[href*='/confirm/stop/'], a[href*='/confirm/resume/']")).to_have_count(0)
    expect(actions).to_contain_text("the run has ended (complete)")
