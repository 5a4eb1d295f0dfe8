"""The run's history and timeline in a real browser (issue 30 §1): oldest first with a toggle, sequence numbers and
times to the millisecond as stored, a lane per agent and a bar per turn, wait and handoff coloured by verdict, a
click on a bar brings its entry into view, labels in words, and on a 390 px phone the timeline scrolls in its box.
"""

from __future__ import annotations

import re

import pytest

from sidewisp.pages import labels
from tests.e2e.conftest import PHONE, axe_violations
from tests.e2e.test_live_pages import expect, in_db_thread, wait_snapshot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


def _receipts(run_id: int) -> list[dict]:
    from receipts.models import Receipt

    rows = Receipt.objects.filter(handoff__run_id=run_id).select_related("handoff").order_by("recorded_at", "pk")
    return in_db_thread(
        lambda: [
            {
                "pk": r.pk,
                "part": r.part,
                "at": r.recorded_at,
                "sender": r.handoff.sender,
                "receiver": r.handoff.receiver,
            }
            for r in rows
        ]
    )


def _verdict(run_id: int) -> str:
    from receipts.models import Handoff

    return in_db_thread(lambda: Handoff.objects.values_list("verdict", flat=True).get(run_id=run_id))


def _ms(at) -> str:
    return f"{at:%H:%M:%S}.{at.microsecond // 1000:03d}"


def test_the_history_is_oldest_first_numbered_to_the_millisecond_with_a_toggle(open_as, people_server):
    run_id = people_server.seeded.wait_run
    stored = _receipts(run_id)
    page = open_as("viewer")
    page.goto(f"{people_server.url}/runs/{run_id}/history/")

    entries = page.locator(".history-entry")
    seqs = [int(n) for n in entries.evaluate_all("els => els.map(e => e.dataset.seq)")]
    assert seqs == list(range(1, len(seqs) + 1))  # oldest first, numbered from 1
    for receipt in stored:  # each receipt's entry shows its stored time to the millisecond
        entry = page.locator(f"#history-receipt-{receipt['pk']}")
        expect(entry.locator(".history-clock")).to_contain_text(_ms(receipt["at"]))
        expect(entry.locator(".history-since")).to_have_text(re.compile(r"^\+\d"))
    shown = entries.evaluate_all("els => els.filter(e => e.dataset.kind == 'receipt').map(e => e.id)")
    assert shown == [f"history-receipt-{r['pk']}" for r in stored]

    page.get_by_role("link", name="newest first").click()
    expect(page.locator("[data-history]")).to_have_attribute("data-order", "newest")
    again = [int(n) for n in page.locator(".history-entry").evaluate_all("els => els.map(e => e.dataset.seq)")]
    assert again == seqs[::-1]
    # Labels in words: no attempt codes, no part codes as the entry's title.
    text = page.locator("[data-history]").inner_text()
    assert not re.search(r"attempt [a-z]+-", text) and "Receipt created" not in text


def test_the_timeline_has_a_lane_per_agent_and_a_bar_per_turn_wait_and_handoff(open_as, people_server):
    run_id = people_server.seeded.wait_run
    stored = _receipts(run_id)
    page = open_as("viewer", viewport={"width": 1280, "height": 500})
    page.goto(f"{people_server.url}/runs/{run_id}/")
    wait_snapshot(page)  # the snapshot replaces the server-rendered history (and its timeline): measure after it

    lanes = page.locator(".tl-lane").evaluate_all("els => els.map(e => e.dataset.lane)")
    assert lanes == [stored[0]["sender"], stored[0]["receiver"]]
    bars = page.locator(".tl-bar").evaluate_all(
        "els => els.map(e => [e.dataset.lane, e.dataset.kind, e.dataset.verdict, e.getAttribute('class')])"
    )
    kinds = [(lane, kind) for lane, kind, _, _ in bars]
    sender, receiver = stored[0]["sender"], stored[0]["receiver"]
    assert kinds == [(sender, "turn"), (sender, "handoff"), (receiver, "turn"), (receiver, "wait")]
    verdict = _verdict(run_id)  # the stored handoff's verdict colours its bars (its deadline passed: uncertain)
    tone = labels.VERDICTS[verdict][2]
    assert all(v == verdict and f"tone-{tone}" in classes for _, _, v, classes in bars)
    assert "tl-open" in bars[-1][3]  # the wait is still open
    expect(page.locator("[data-now]")).to_have_count(1)  # a waiting run: the current moment is marked

    target = page.locator(f"#history-receipt-{next(r['pk'] for r in stored if r['part'] == 'wait')}")
    expect(target).not_to_be_in_viewport()
    page.locator(".tl-link[data-anchor] .tl-wait").click()
    expect(target).to_be_in_viewport()


def test_on_a_phone_the_timeline_scrolls_in_its_box_and_the_page_does_not(open_as, people_server):
    run_id = people_server.seeded.wait_run
    page = open_as("viewer", viewport=PHONE)
    page.goto(f"{people_server.url}/runs/{run_id}/")
    wait_snapshot(page)  # the snapshot replaces the server-rendered history (and its timeline): measure after it

    box = page.locator(".timeline-box")
    sizes = box.evaluate("b => ({inner: b.scrollWidth, shown: b.clientWidth})")
    assert sizes["inner"] > sizes["shown"] > 0
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    assert axe_violations(page) == []
