"""Issue 21 §3 and §4 in a real Chromium: honest wait outcomes, window-true verdict tiles, and an approver on a phone.

At 390 x 844 the header is short, the confirm page's Approve button is on the first screen, every action is a
44 px target (WCAG 2.5.5) and the keyboard starts in the confirm form; axe finds nothing on those pages.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import PHONE, axe_violations
from tests.e2e.test_live_pages import expect, in_db_thread, shoot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

HEADER_MAX = 110  # px of 844: two rows of 44 px targets and their gaps
TARGET = 44  # px, WCAG 2.5.5
# The touch targets of a page: its navigation, buttons and action links, as laid out (visible ones only).
TARGET_BOXES = """(selector) => [...document.querySelectorAll(selector)]
    .filter(el => el.offsetParent !== null)
    .map(el => { const r = el.getBoundingClientRect();
                 return {text: el.textContent.trim().slice(0, 30), width: r.width, height: r.height}; })"""
TARGETS = "header.top a, header.top button, a.action, .action-form button, .action-form .buttons > a, .tabs a"


def _resolved_waits() -> None:
    """A wait ops-lead rejected and one whose deadline passed (the safe default applied), both resolved."""
    from django.contrib.auth import get_user_model

    from receipts.ingest.recording import record
    from receipts.org import audit
    from tests.conftest import handoff_parts

    lead = get_user_model().objects.get(username="ops-lead")
    for handoff_id, resolution, actor, action in (
        ("h-phone-rejected", "rejected", lead, "wait.reject"),
        ("h-phone-expired", "expired", None, "wait.expire"),
    ):
        parts = handoff_parts("waiting")
        wait = {**parts[3][1], "owner": "ops-lead"}
        parts[3] = ("wait", wait)
        for part, value in parts[:4]:
            result = record(handoff_id=handoff_id, operation_id=f"op-{handoff_id}", part=part, value=value)
        resolved = {**wait, "resolved": True, "resolution": resolution}
        result = record(
            handoff_id=handoff_id, operation_id=f"op-{handoff_id}", part="wait", value=resolved, attempt="2"
        )
        handoff = result.handoff
        audit.log(
            actor=actor, action=action, object_type="handoff", object_id=handoff.pk, handoff=handoff, outcome="done"
        )


def _age_all_but_one_handoff() -> None:
    """Every seeded handoff but the healthy one was created two days ago: outside 15 min, inside 7 d."""
    from datetime import timedelta

    from django.utils import timezone

    from receipts.models import Handoff

    Handoff.objects.exclude(handoff_id="h-phone-ok").update(created_at=timezone.now() - timedelta(days=2))


def test_rejected_and_expired_waits_carry_their_outcome_never_a_check_mark(open_as, people_server):
    in_db_thread(_resolved_waits)
    page = open_as("approver")
    page.goto(f"{people_server.url}/waits/")
    resolved = page.locator("#waits-resolved")
    rejected = resolved.locator("li.row", has_text="h-phone-rejected").locator(".cell-verdict")
    expired = resolved.locator("li.row", has_text="h-phone-expired").locator(".cell-verdict")

    expect(rejected).to_have_text("✖ Rejected by ops-lead")
    expect(expired).to_have_text("⌛ Expired — safe default applied")
    for badge in (rejected, expired):
        assert "✔" not in badge.inner_text() and "healthy" not in badge.inner_text().lower()
    assert axe_violations(page) == []


def test_the_verdict_tiles_change_with_the_window(open_as, people_server):
    in_db_thread(_age_all_but_one_handoff)
    page = open_as("viewer")
    page.goto(f"{people_server.url}/?window=15m")

    def tiles() -> dict[str, int]:
        counts = page.locator("#verdict-counts [data-count]")
        return {el.get_attribute("data-count"): int(el.inner_text()) for el in counts.all()}

    short = tiles()
    header = int(page.locator('[data-stat="handoffs"] dd').inner_text())
    page.locator(".windows a", has_text="7 d").click()
    page.wait_for_url("**window=7d")
    week = tiles()

    assert (short["HEALTHY"], sum(short.values()), header) == (1, 1, 1)
    assert sum(week.values()) > sum(short.values())
    expect(page.locator("#counts-title")).to_contain_text("created in the last 7 d")


def test_on_a_phone_the_header_is_short_and_every_target_is_44_px(open_as, people_server):
    page = open_as("approver", viewport=PHONE)
    failures = []
    for path in ("/waits/", "/", f"/confirm/approve/{people_server.seeded.wait}/"):
        page.goto(people_server.url + path)
        expect(page.locator("h1").first).to_be_visible()
        header = page.locator("header.top").bounding_box()
        assert header["height"] <= HEADER_MAX, (path, header)
        small = [box for box in page.evaluate(TARGET_BOXES, TARGETS) if min(box["width"], box["height"]) < TARGET - 0.5]
        failures += [(path, box) for box in small]
    shoot(page, "phone-confirm-approve")
    assert failures == []
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


def test_on_a_phone_approve_is_on_the_first_screen_above_the_details(open_as, people_server):
    page = open_as("approver", viewport=PHONE)
    page.goto(f"{people_server.url}/confirm/approve/{people_server.seeded.wait}/")
    approve = page.locator("button[data-confirm=approve]").bounding_box()
    details = page.locator("#details-title").bounding_box()

    assert approve["y"] + approve["height"] <= PHONE["height"], approve
    assert approve["y"] < details["y"]
    assert axe_violations(page) == []


@pytest.mark.parametrize("what", ["approve", "reject", "reassign"])
def test_the_keyboard_starts_in_the_confirm_form(open_as, people_server, what):
    page = open_as("admin")
    page.goto(f"{people_server.url}/confirm/{what}/{people_server.seeded.wait}/")

    assert page.evaluate("document.activeElement.id") == "confirm-form"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('#confirm-form') !== null")


def _decisions() -> tuple[int, int]:
    from receipts.models import AuditEntry, Decision

    return Decision.objects.count(), AuditEntry.objects.filter(action="wait.reject").count()


def _wait_due_in_7_minutes() -> int:
    from receipts.models import Handoff

    return Handoff.objects.get(handoff_id="h-phone-wait-1-handoff-with-a-long-id").pk


def test_reloading_the_reject_result_page_sends_nothing_again(open_as, people_server):
    page = open_as("approver", viewport=PHONE)
    page.goto(f"{people_server.url}/confirm/reject/{in_db_thread(_wait_due_in_7_minutes)}/")
    page.fill("#confirm-form textarea", "over budget")
    page.locator("button[data-confirm=reject]").click()
    page.wait_for_url("**/decided/?key=*")
    expect(page.locator("#result-title")).to_have_text("Done")

    page.reload()

    expect(page.locator("#result-title")).to_have_text("Done")
    assert in_db_thread(_decisions) == (1, 1)
    assert axe_violations(page) == []
