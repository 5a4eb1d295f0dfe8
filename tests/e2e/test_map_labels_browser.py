"""A team map that can be read (issue 30 §2), in real Chromium: arrow labels that never cover each other or an
agent, each saying its handoffs and the share that failed, a legend, accessible names that contain the words
shown (axe's WCAG 2.1 `label-content-name-mismatch`), and a phone that pans and zooms the map inside its box.

Two teams: the demo contracts' routes, each also taken the other way, and a generated 12-agent team whose hub
hands off to each of the eleven others and back (the placement this replaced put 18 pairs of its labels on top of
each other). The bounding boxes are the browser's (`getBBox`), so the font it really uses is what counts.
Persona: watcher, a viewer.
"""

from __future__ import annotations

import itertools
import re

import pytest

from tests.e2e.conftest import AXE, PHONE
from tests.e2e.test_live_pages import expect, in_db_thread, wait_snapshot
from tests.sidewisp.test_map_label_placement import twelve_agents_both_ways

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

GRAPH = "map-team"
MAP = f"/map/?window=24h&graph={GRAPH}"
DEMO_BOTH_WAYS = [  # the demo contracts' routes, each also taken back: (sender, receiver, verdict, handoffs)
    ("triage", "sales", "HEALTHY", 7),
    ("sales", "triage", "FALSE_COMPLETE", 2),
    ("triage", "support", "HEALTHY", 5),
    ("support", "triage", "HEALTHY", 1),
    ("sales", "billing", "HEALTHY", 4),
    ("billing", "sales", "STALE_CONTROL", 1),
    ("triage", "coder", "TOOL_PROTOCOL", 1),
    ("coder", "triage", "HEALTHY", 3),
]
LABEL = re.compile(r"^(?:#\d+ )?(?:undeclared: )?(\d+) · (<1%|>99%|\d+%) failed(?: · \d+ undeclared)?$")


def _seed(routes) -> None:
    """`routes` as settled handoffs, one run of graph GRAPH per handoff (the map is filtered to that graph, so
    every route drawn is one of `routes`)."""
    import uuid
    from datetime import UTC, datetime

    from receipts.models import Handoff, Run

    now = datetime.now(UTC)
    for sender, receiver, verdict, count in routes:
        for _ in range(count):
            run = Run.objects.create(
                operation_id=f"op-map-{uuid.uuid4().hex[:10]}", thread_id=uuid.uuid4().hex, graph=GRAPH
            )
            Handoff.objects.create(
                handoff_id=f"h-map-{uuid.uuid4().hex[:12]}",
                run=run,
                sender=sender,
                receiver=receiver,
                route_version="routes/1",
                verdict=verdict,
                reduced_part={"graph_scope": "parent"},
                destination_part={"node_id": receiver},
                settled_at=now,
            )


def _stored() -> dict[str, tuple[int, int]]:
    """Per route, its handoffs and how many of them failed, recounted from the table."""
    from receipts.models import Handoff

    found: dict[str, tuple[int, int]] = {}
    for sender, receiver, verdict in Handoff.objects.filter(run__graph=GRAPH).values_list(
        "sender", "receiver", "verdict"
    ):
        total, failed = found.get(f"{sender} → {receiver}", (0, 0))
        found[f"{sender} → {receiver}"] = (total + 1, failed + (verdict not in ("HEALTHY", "WAITING_ON_APPROVAL")))
    return found


def _rate(failed: int, total: int) -> str:
    share = round(100 * failed / total)
    return "<1%" if failed and not share else ">99%" if failed < total and share == 100 else f"{share}%"


def _boxes(page) -> dict[str, list[dict]]:
    """The browser's own boxes of every arrow's words and every agent, in the picture's coordinates."""
    return page.locator("#team-map svg.map").evaluate(
        """svg => ({
            labels: [...svg.querySelectorAll('a.map-route text')].map(t => {
                const b = t.getBBox();
                return {route: t.closest('a').dataset.route, text: t.textContent,
                        name: t.closest('a').getAttribute('aria-label'), x: b.x, y: b.y, w: b.width, h: b.height};
            }),
            nodes: [...svg.querySelectorAll('a.map-node rect')].map(r => {
                const b = r.getBBox();
                return {name: r.closest('a').dataset.agent, x: b.x, y: b.y, w: b.width, h: b.height};
            }),
        })"""
    )


def _meet(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]
    )


def _check_labels(page) -> int:
    boxes = _boxes(page)
    labels, nodes = boxes["labels"], boxes["nodes"]
    clashes = [(a, b) for a, b in itertools.combinations(labels, 2) if _meet(a, b)]
    assert clashes == []
    covered = [(a["route"], n["name"]) for a in labels for n in nodes if _meet(a, n)]
    assert covered == []
    stored = in_db_thread(_stored)
    shown = {}
    for label in labels:
        found = LABEL.match(label["text"])
        if label["text"] != "unused":
            assert found, label["text"]
            shown[label["route"]] = (int(found[1]), found[2])
        assert label["text"] in label["name"], label  # the accessible name holds the words shown
        assert label["name"].startswith(label["text"]), label
    assert shown == {route: (total, _rate(failed, total)) for route, (total, failed) in stored.items()}
    return len(labels)


def _wcag21_violations(page) -> list[str]:
    """axe-core's WCAG 2.0 and 2.1 A/AA violations (2.1 holds `label-content-name-mismatch`)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    return page.evaluate(
        """async () => {
            const tags = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];
            const result = await axe.run(document, {runOnly: {type: 'tag', values: tags}});
            return result.violations.map(v => `${v.id} at ${v.nodes.map(n => n.target.join(' ')).slice(0, 3)}`);
        }"""
    )


def test_the_demo_team_with_routes_both_ways_has_labels_apart_that_say_count_and_failure_rate(open_as, people_server):
    in_db_thread(_seed, DEMO_BOTH_WAYS)
    page = open_as("viewer")
    page.goto(people_server.url + MAP)
    wait_snapshot(page)

    assert _check_labels(page) >= len(DEMO_BOTH_WAYS)
    legend = page.locator("#team-map .map-legend")
    expect(legend).to_contain_text("Failing")
    expect(legend).to_contain_text("the share of them that failed")
    assert _wcag21_violations(page) == []


def test_a_twelve_agent_team_with_routes_both_ways_has_labels_apart_and_no_wcag_21_violation(open_as, people_server):
    in_db_thread(_seed, twelve_agents_both_ways())
    page = open_as("viewer")
    page.goto(people_server.url + MAP)
    wait_snapshot(page)

    assert _check_labels(page) >= 22
    assert _wcag21_violations(page) == []


def test_on_a_phone_the_twelve_agent_map_pans_and_zooms_inside_its_box(open_as, people_server):
    in_db_thread(_seed, twelve_agents_both_ways())
    page = open_as("viewer", viewport=PHONE)
    page.goto(people_server.url + MAP)
    wait_snapshot(page)
    box = page.locator("#team-map .map-scroll")
    frame = box.bounding_box()
    assert frame["x"] >= 0 and frame["x"] + frame["width"] <= PHONE["width"]
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]

    sizes = box.evaluate("b => ({wide: b.scrollWidth, shown: b.clientWidth})")
    assert sizes["wide"] > sizes["shown"]  # wider than the phone: it pans sideways, inside its box
    box.hover()
    page.mouse.wheel(300, 0)
    expect(box).not_to_have_js_property("scrollLeft", 0)
    assert page.evaluate("() => window.scrollX") == 0

    page.get_by_label("Fit the whole map in its box").check()  # zoomed out: the whole map in the box's width
    svg = page.locator("#team-map svg.map")
    expect(box).to_have_js_property("scrollLeft", 0)
    assert svg.bounding_box()["width"] <= box.evaluate("b => b.clientWidth") + 0.5
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
    assert _check_labels(page) >= 22  # still apart: the picture is scaled, not laid out again
    assert _wcag21_violations(page) == []
