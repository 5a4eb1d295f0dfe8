"""The waits inbox in real Chromium (issue 30 §3, §7): the tab title's live count of the user's open waits, a
notification (after permission) when one opens in the background, a batch of approvals, and axe on both pages."""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import PEOPLE, axe_violations
from tests.e2e.test_live_pages import LIVE_TIMEOUT_MS, PASSWORD, expect, in_db_thread

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

# Records each Notification the page makes and each permission request, and lets the test put the page in the
# background (document.hidden), which a headless page never is by itself.
NOTIFICATION_SPY = """
(() => {
  const Real = window.Notification;
  window.__notes = []; window.__asked = 0; window.__hidden = false;
  function Spy(title, options) {
    window.__notes.push({title: title, url: (options && options.data || {}).url});
    return {};
  }
  Object.defineProperty(Spy, "permission", {get: () => Real.permission});
  Spy.requestPermission = function () { window.__asked += 1; return Real.requestPermission(); };
  window.Notification = Spy;
  Object.defineProperty(document, "hidden", {get: () => window.__hidden});
})();
"""


def open_wait(n: int, tool: str = "refund_order") -> int:
    """A new open wait owned by ops-lead whose app sent its pending call (names only); its pk."""
    from datetime import UTC, datetime, timedelta

    from receipts.ingest.recording import record
    from receipts.models import Run
    from tests.conftest import handoff_parts

    parts = handoff_parts("waiting", deadline=datetime.now(UTC) + timedelta(hours=1))
    parts[3] = ("wait", {**parts[3][1], "owner": "ops-lead"})
    handoff = None
    for part, value in parts:
        handoff = record(handoff_id=f"h-inbox-{n}", operation_id=f"op-inbox-{n}", part=part, value=value).handoff
    call = {
        "tool": tool,
        "arg_types": {"order_id": "str", "amount": "float"},
        "allowed_decisions": ["approve", "reject"],
        "resume_token_id": handoff.wait_part["resume_token_id"],
        "interrupts": [{"id": f"i-{n}", "calls": 1}],
    }
    Run.objects.filter(pk=handoff.run_id).update(pending_call=call)
    return handoff.pk


def cancel(pk: int) -> None:
    import uuid

    from django.contrib.auth import get_user_model

    from receipts import actions

    admin = get_user_model().objects.get(username=PEOPLE["admin"])
    assert actions.cancel(user=admin, handoff_id=pk, key=uuid.uuid4().hex, reason="test").ok


def reassign(pk: int, to: str) -> None:
    import uuid

    from django.contrib.auth import get_user_model

    from receipts import actions

    admin = get_user_model().objects.get(username=PEOPLE["admin"])
    done = actions.reassign(user=admin, handoff_id=pk, owner=to, deadline_minutes=60, key=uuid.uuid4().hex)
    assert done.ok, done.message


def decided() -> dict:
    from receipts.models import AuditEntry, Decision
    from receipts.workers import claims

    decisions = list(Decision.objects.select_related("run"))
    return {
        "decisions": sorted(d.handoff_id for d in decisions),
        "done": AuditEntry.objects.filter(action="wait.approve", outcome="done").count(),
        "offered_to_apps": sum(claims.unclaimed(d.run).filter(pk=d.pk).exists() for d in decisions),
    }


@pytest.fixture
def approver_page(browser, people_server):
    context = browser.new_context(permissions=["notifications"], bypass_csp=True)
    context.add_init_script(NOTIFICATION_SPY)
    page = context.new_page()
    page.goto(f"{people_server.url}/login/")
    page.fill("#id_username", PEOPLE["approver"])
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(lambda url: "/login/" not in url)
    yield page
    context.close()


def test_the_title_counts_my_open_waits_live_and_a_new_one_notifies_in_the_background(approver_page, people_server):
    page = approver_page
    page.goto(f"{people_server.url}/waits/?mine=1")
    expect(page).to_have_title(re.compile(r"^\(3\) Waits"), timeout=LIVE_TIMEOUT_MS)  # the seeded three
    # Permission is asked only from the button, never on load (granted already here: the page says so).
    assert page.evaluate("window.__asked") == 0
    expect(page.locator("#notify-state")).to_contain_text("Notifications are on")

    page.evaluate("window.__hidden = true")
    new = in_db_thread(open_wait, 1)
    expect(page).to_have_title(re.compile(r"^\(4\) Waits"), timeout=LIVE_TIMEOUT_MS)
    page.wait_for_function("window.__notes.length === 1", timeout=LIVE_TIMEOUT_MS)
    note = page.evaluate("window.__notes[0]")
    assert note["url"].endswith(f"/confirm/approve/{new}/")

    in_db_thread(cancel, new)
    expect(page).to_have_title(re.compile(r"^\(3\) Waits"), timeout=LIVE_TIMEOUT_MS)
    assert page.evaluate("window.__notes.length") == 1  # a closed wait announces nothing


def test_a_batch_of_approvals_is_applied_once_each_and_names_the_wait_reassigned_meanwhile(
    approver_page, people_server
):
    page = approver_page
    picked = [in_db_thread(open_wait, n) for n in range(2, 6)]
    page.goto(f"{people_server.url}/waits/")
    row = page.locator(f"#wait-{picked[0]}")
    expect(row.locator("code[data-tool]")).to_have_text("refund_order")
    expect(row.locator("[data-arg-key]")).to_have_text(["amount", "order_id"])
    # A seeded wait the approver cannot decide (overdue) says why and who can, or offers what can be done.
    assert axe_violations(page) == []

    for pk in picked:
        page.check(f"#pick-{pk}")
    page.click("button[data-batch=approve]")
    page.wait_for_url(re.compile(r"/waits/batch/"))
    expect(page.locator("[data-batch-item]")).to_have_count(4)
    expect(page.locator("[data-arg-keys]").first).to_contain_text("order_id")
    assert axe_violations(page) == []

    in_db_thread(reassign, picked[3], PEOPLE["admin"])  # meanwhile, the last is given to someone else
    page.click("button[data-confirm=batch-approve]")

    expect(page.locator("[data-applied]")).to_have_count(3)
    expect(page.locator(f'[data-left-out="{picked[3]}"]')).to_contain_text(f"reassigned to {PEOPLE['admin']} meanwhile")
    found = in_db_thread(decided)
    assert found == {"decisions": sorted(picked[:3]), "done": 3, "offered_to_apps": 3}
    assert axe_violations(page) == []

    page.go_back()
    page.click("button[data-confirm=batch-approve]")  # the same page again: nothing is decided twice
    expect(page.locator("[data-repeated]")).to_have_count(3)
    assert in_db_thread(decided)["decisions"] == sorted(picked[:3])


def test_a_viewer_sees_why_a_wait_offers_them_nothing_and_who_can(open_as, people_server):
    wait = in_db_thread(open_wait, 9)
    page = open_as("viewer")
    page.goto(f"{people_server.url}/waits/")
    words = page.locator(f"#wait-{wait} [data-who-can]")
    expect(words).to_contain_text("needs its owner (ops-lead)")
    assert axe_violations(page) == []
