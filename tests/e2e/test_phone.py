"""The pages at a phone's width (390 px) and the runs list at a desktop's, measured in a real Chromium.

An approver approves from their phone: in the waits inbox nothing may sit on
top of anything else, the countdown stays on one line and every action is on
the screen. Boxes are compared as the browser laid them out.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import DESKTOP, PHONE
from tests.e2e.test_live_pages import expect, shoot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

# Per row: the named boxes (one per matching element), as the layout placed them.
ROW_BOXES = """([rowSelector, parts]) => [...document.querySelectorAll(rowSelector)].map(row => {
    const boxes = [];
    for (const [name, selector] of Object.entries(parts)) {
        row.querySelectorAll(selector).forEach((el, i) => {
            const r = el.getBoundingClientRect();
            boxes.push({name: `${name}${i}`, left: r.left, right: r.right, top: r.top, bottom: r.bottom,
                        lines: el.getClientRects().length});
        });
    }
    return {id: row.id, boxes};
})"""


def _overlaps(a: dict, b: dict) -> bool:
    # Touching edges (a shared pixel row) is not an overlap; half a pixel of rounding is tolerated.
    return min(a["right"], b["right"]) - max(a["left"], b["left"]) > 0.5 and (
        min(a["bottom"], b["bottom"]) - max(a["top"], b["top"]) > 0.5
    )


def _overlapping_pairs(rows: list[dict]) -> list[tuple[str, str, str]]:
    found = []
    for row in rows:
        boxes = row["boxes"]
        for i, a in enumerate(boxes):
            found += [(row["id"], a["name"], b["name"]) for b in boxes[i + 1 :] if _overlaps(a, b)]
    return found


def _no_sideways_scroll(page) -> None:
    width = page.evaluate("document.documentElement.clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth") <= width, page.url


def test_on_a_phone_the_waits_inbox_rows_have_nothing_on_top_of_anything(open_as, people_server):
    page = open_as("approver", viewport=PHONE)
    page.goto(f"{people_server.url}/waits/")
    expect(page.locator("#waits-list li.row")).to_have_count(3)
    rows = page.evaluate(
        ROW_BOXES,
        [
            "#waits-list li.row",
            {"badge": ".verdict", "link": ".cell-main > a", "countdown": "time.countdown", "action": "a.action"},
        ],
    )
    shoot(page, "phone-waits")
    names = [{box["name"] for box in row["boxes"]} for row in rows]
    assert all({"badge0", "link0", "countdown0"} <= found for found in names), rows
    assert sum("action0" in found for found in names) >= 2, rows  # the two waits not yet overdue
    assert _overlapping_pairs(rows) == []


def test_on_a_phone_the_countdown_stays_on_one_line_and_every_action_is_on_screen(open_as, people_server):
    page = open_as("approver", viewport=PHONE)
    page.goto(f"{people_server.url}/waits/")
    expect(page.locator("#waits-list li.row")).to_have_count(3)
    rows = page.evaluate(ROW_BOXES, ["#waits-list li.row", {"countdown": "time.countdown", "action": "a.action"}])
    for row in rows:
        countdown = next(box for box in row["boxes"] if box["name"] == "countdown0")
        assert countdown["lines"] == 1, row
        for box in row["boxes"]:
            assert 0 <= box["left"] and box["right"] <= PHONE["width"], (row["id"], box)
    _no_sideways_scroll(page)


def test_on_a_desktop_the_runs_list_keeps_the_verdict_badge_off_the_run_link(open_as, people_server):
    page = open_as("viewer", viewport=DESKTOP)
    page.goto(f"{people_server.url}/runs/")
    expect(page.locator("#runs-list")).to_contain_text("Destination not started")
    rows = page.evaluate(ROW_BOXES, ["#runs-list li.row", {"badge": ".verdict", "link": ".cell-main > a"}])
    shoot(page, "desktop-runs")
    assert len(rows) == 8 and all({"badge0", "link0"} <= {box["name"] for box in row["boxes"]} for row in rows)
    assert _overlapping_pairs(rows) == []


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/runs/",
        "/runs/{wait_run}/",
        "/runs/{stale_run}/",
        "/false-completions/",
        "/audit/",
        "/system/",
        "/runs/start/",
        "/confirm/approve/{wait}/",
        "/confirm/reassign/{wait}/",
        "/confirm/stop/{stale_run}/",
    ],
)
def test_on_a_phone_no_page_scrolls_sideways(open_as, people_server, path):
    page = open_as("admin", viewport=PHONE)
    seeded = people_server.seeded
    page.goto(people_server.url + path.format(**vars(seeded)))
    expect(page.locator("h1")).to_be_visible()
    _no_sideways_scroll(page)
