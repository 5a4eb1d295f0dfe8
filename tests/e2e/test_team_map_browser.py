"""The team map in a real browser (issue 21 §2): counts equal to the database's, failing routes in the failure
colour, a click on an arrow or a node that lists exactly its runs, a phone that keeps the map in its box, and axe.

daphne serves the app on the handoffs of `seed_pages` (tests/e2e/conftest.py) plus the routes of `_seed_routes`:
a healthy route, a failing one, an undeclared one and a run of two handoffs. Persona: watcher, a viewer.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from tests.conftest import handoff_parts
from tests.e2e.conftest import PHONE, axe_violations
from tests.e2e.test_live_pages import expect, in_db_thread, record_parts, wait_snapshot

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

FAILING_ROUTE = ("triage", "support")  # declared, taken by a false completion
UNDECLARED_ROUTE = ("billing", "support")  # routes/1 declares no route from billing
HEALTHY_ROUTE = ("sales", "billing")
MAP = "/map/?window=24h"
WIDE_FAN_OUT = ("coder", "refunds", "shipping", "legal", "returns")


def _seed_routes() -> int:
    """Handoffs over a healthy, a failing and an undeclared route, recorded as the pages' seed records them."""
    record_parts("h-map-billing-1", "op-map-billing-1", handoff_parts("healthy", sender="sales", receiver="billing"))
    record_parts(
        "h-map-support", "op-map-support", handoff_parts("false_complete", sender="triage", receiver="support")
    )
    record_parts("h-map-stray", "op-map-stray", handoff_parts("healthy", sender="billing", receiver="support"))
    # One run of two handoffs: the run page draws the path it took.
    first = record_parts("h-map-path-1", "op-map-path", handoff_parts("healthy"))
    record_parts("h-map-path-2", "op-map-path", handoff_parts("healthy", sender="sales", receiver="billing"))
    return in_db_thread(_run_of, first)


def _run_of(handoff_pk: int) -> int:
    from receipts.models import Handoff

    return Handoff.objects.values_list("run_id", flat=True).get(pk=handoff_pk)


def _counts_in_database() -> Counter:
    """Handoffs per (sender, receiver), the way an operator would count them with SQL."""
    from django.db.models import Count

    from receipts.models import Handoff

    rows = Handoff.objects.values("sender", "receiver").annotate(n=Count("id"))
    return Counter({(row["sender"], row["receiver"]): row["n"] for row in rows})


def _runs_in_database(*, sender: str = "", receiver: str = "", agent: str = "") -> set[str]:
    """The row ids of the runs list for the runs with a handoff over that route, or by or to that agent."""
    from django.db.models import Q

    from receipts.models import Handoff

    if agent:
        found = Handoff.objects.filter(Q(sender=agent) | Q(receiver=agent))
    else:
        found = Handoff.objects.filter(sender=sender, receiver=receiver)
    return {f"run-row-{pk}" for pk in found.values_list("run_id", flat=True)}


def _drawn_arrows(page) -> list[dict]:
    """Each arrow of the map as the browser has it: route, count, classes, label and its line's colour."""
    return page.locator("#team-map a.map-route").evaluate_all(
        """arrows => arrows.map(a => ({
            route: a.dataset.route, count: Number(a.dataset.count), classes: [...a.classList],
            label: a.querySelector('text').textContent,
            stroke: getComputedStyle(a.querySelector('polyline')).stroke,
        }))"""
    )


def _shown_count(label: str) -> int:
    """The handoffs an arrow's text says it carries: "4 · 25% failed", "undeclared: 1 · 100% failed", "unused"."""
    found = re.match(r"(?:#\d+ )?(?:undeclared: )?(\d+)", label)
    return int(found[1]) if found else 0


def _failure_colour(page) -> str:
    """The colour the stylesheet calls --bad, as the browser computes colours."""
    return page.evaluate(
        """() => {
            const probe = document.createElement('span');
            probe.style.color = 'var(--bad)';
            document.body.append(probe);
            const colour = getComputedStyle(probe).color;
            probe.remove();
            return colour;
        }"""
    )


def _listed_runs(page) -> set[str]:
    return set(page.locator("li.row[id^=run-row-]").evaluate_all("rows => rows.map(r => r.id)"))


def _route(pair: tuple[str, str]) -> str:
    return f"{pair[0]} → {pair[1]}"


def test_the_map_counts_each_route_like_the_database_and_draws_failing_routes_in_the_failure_colour(
    open_as, people_server
):
    _seed_routes()
    page = open_as("viewer")
    page.goto(people_server.url + MAP)
    wait_snapshot(page)
    expect(page.locator("#team-map svg.map")).to_be_visible()
    arrows = _drawn_arrows(page)

    shown, counted = Counter(), Counter()
    for arrow in arrows:
        pair = tuple(arrow["route"].split(" → "))
        shown[pair] += _shown_count(arrow["label"])
        counted[pair] += arrow["count"]
    database = in_db_thread(_counts_in_database)
    assert len(database) == 4  # the seed's triage → sales, and the three other routes of `_seed_routes`
    assert +shown == database  # every route taken shows its count as text, and no route more
    assert +counted == database
    by_route = {arrow["route"]: arrow for arrow in arrows}

    bad = _failure_colour(page)
    failing, stray, healthy = (by_route[_route(r)] for r in (FAILING_ROUTE, UNDECLARED_ROUTE, HEALTHY_ROUTE))
    assert "route-failing" in failing["classes"] and failing["stroke"] == bad
    assert "route-undeclared" in stray["classes"] and stray["stroke"] == bad
    assert "route-healthy" in healthy["classes"] and healthy["stroke"] != bad


def test_clicking_a_failing_arrow_lists_exactly_the_runs_that_took_that_route(open_as, people_server):
    _seed_routes()
    page = open_as("viewer")
    page.goto(people_server.url + MAP)
    for pair in (FAILING_ROUTE, HEALTHY_ROUTE):
        page.locator(f'#team-map a.map-route[data-route="{_route(pair)}"] text').click()
        page.wait_for_url(lambda url: "/runs/" in url)
        expect(page.locator("h1")).to_be_visible()
        expected = in_db_thread(_runs_in_database, sender=pair[0], receiver=pair[1])
        assert expected  # the route was taken
        assert _listed_runs(page) == expected, pair
        page.go_back()
        expect(page.locator("#team-map svg.map")).to_be_visible()


def test_clicking_an_agent_lists_the_runs_it_sent_or_received_a_handoff_in(open_as, people_server):
    _seed_routes()
    page = open_as("viewer")
    page.goto(people_server.url + MAP)
    page.locator('#team-map a.map-node[data-agent="billing"] rect').click()
    page.wait_for_url(lambda url: "/runs/" in url and "agent=billing" in url)
    expected = in_db_thread(_runs_in_database, agent="billing")
    assert len(expected) == 3  # op-map-billing-1, op-map-stray, op-map-path
    assert _listed_runs(page) == expected


def test_a_viewer_on_a_phone_sees_the_map_inside_its_box_and_the_page_does_not_scroll_sideways(open_as, people_server):
    _seed_routes()
    for receiver in WIDE_FAN_OUT:  # a team wider than a phone: one layer of seven agents below triage
        record_parts(f"h-map-wide-{receiver}", f"op-map-wide-{receiver}", handoff_parts("healthy", receiver=receiver))
    page = open_as("viewer", viewport=PHONE)
    page.goto(people_server.url + MAP)
    wait_snapshot(page)  # measured after the socket's snapshot, which replaces the server-rendered map
    box = page.locator("#team-map .map-scroll")
    expect(box).to_be_visible()
    expect(box.locator("a.map-route").first).to_be_visible()
    frame = box.bounding_box()
    assert frame["x"] >= 0 and frame["x"] + frame["width"] <= PHONE["width"]
    assert page.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]  # no sideways page scroll

    sizes = box.evaluate("b => ({inner: b.scrollWidth, shown: b.clientWidth})")
    assert sizes["inner"] > sizes["shown"]  # the picture is wider than the phone: it scrolls inside its box
    rightmost = box.locator("a.map-node").evaluate_all(
        "nodes => nodes.reduce((a, b) => (b.getBBox().x > a.getBBox().x ? b : a)).dataset.agent"
    )
    last = box.locator(f'a.map-node[data-agent="{rightmost}"]')
    expect(last).not_to_be_in_viewport()
    last.scroll_into_view_if_needed()
    expect(last).to_be_in_viewport()
    assert box.evaluate("b => b.scrollLeft") > 0
    assert page.evaluate("() => window.scrollX") == 0  # the box scrolled, the page did not


def test_a_run_page_draws_the_path_its_run_took_in_order(open_as, people_server):
    run = _seed_routes()
    page = open_as("viewer")
    page.goto(f"{people_server.url}/runs/{run}/")
    wait_snapshot(page)
    taken = page.locator("#team-map a.map-route").evaluate_all(
        "arrows => arrows.filter(a => a.dataset.count > 0)"
        ".map(a => [a.dataset.route, a.querySelector('text').textContent])"
    )
    assert sorted(taken) == [["sales → billing", "#2 1 · 0% failed"], ["triage → sales", "#1 1 · 0% failed"]]


def test_the_map_page_and_a_run_page_with_its_path_have_no_wcag_violation(open_as, people_server):
    run = _seed_routes()
    found = []
    for viewport in (None, PHONE):
        page = open_as("viewer", **({"viewport": viewport} if viewport else {}))
        for path in (MAP, f"/runs/{run}/"):
            page.goto(people_server.url + path)
            expect(page.locator("#team-map svg.map")).to_be_visible()
            found += [f"{path} {viewport}: {v['id']} ({v['help']}) at {v['targets']}" for v in axe_violations(page)]
    page.goto(people_server.url + "/map/?window=7d&graph=nosuch")  # a refused choice: its error beside the map
    expect(page.locator(".map-filters p.error")).to_be_visible()
    expect(page.locator("#team-map svg.map")).to_be_visible()
    found += [f"refused graph: {v['id']} at {v['targets']}" for v in axe_violations(page)]
    assert found == []
