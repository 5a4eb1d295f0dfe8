"""Where the team map's arrow labels go (issue 30 §2): a pure function, rectangles in, centres out, no overlaps.

`maplabels.place` is tested on its own with generated obstacles and arrows, then through `mapdrawing.draw` on the
shapes that used to overlap: routes taken both ways, a wide fan-out, and a generated 12-agent team.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from receipts.queries.teammap import ROOT, RouteRow, build
from sidewisp.pages import maplabels
from sidewisp.pages.mapdrawing import LABEL_H, draw

COORD = st.floats(-200, 600, allow_nan=False)
RECT = st.tuples(COORD, COORD, st.floats(1, 160), st.floats(1, 60))
PATH = st.lists(st.tuples(COORD, COORD), min_size=1, max_size=4).map(tuple)
LABEL = st.builds(maplabels.Label, PATH, st.floats(8, 180), st.floats(8, 20))


def twelve_agents_both_ways() -> list[tuple[str, str, str, int]]:
    """A 12-agent team whose hub hands off to each of the eleven others and each hands back (one layer of
    eleven, two arrows to each): (sender, receiver, verdict, count), a failing handoff back on every third."""
    agents = [f"agent-{i:02d}" for i in range(12)]
    routes = [(agents[0], agent, "HEALTHY", 3 + i) for i, agent in enumerate(agents[1:])]
    routes += [
        (agent, agents[0], "FALSE_COMPLETE" if i % 3 == 0 else "HEALTHY", 1 + i % 4)
        for i, agent in enumerate(agents[1:])
    ]
    return routes


def _rects(drawing) -> tuple[list, list]:
    labels = [(a.label_x - a.label_w / 2, a.label_y - LABEL_H / 2, a.label_w, LABEL_H) for a in drawing.arrows]
    nodes = [(n.x, n.y, n.w, n.h) for n in drawing.nodes]
    return labels, nodes


def _assert_apart(drawing) -> None:
    labels, nodes = _rects(drawing)
    for a, b in itertools.combinations(labels, 2):
        assert not maplabels.overlap(a, b), (a, b)
    for label, node in itertools.product(labels, nodes):
        assert not maplabels.overlap(label, node), (label, node)
    for x, y, w, h in labels:  # inside the picture, never clipped
        assert 0 <= x and x + w <= drawing.width and 0 <= y and y + h <= drawing.height


@settings(max_examples=150, deadline=None)
@given(obstacles=st.lists(RECT, max_size=12), labels=st.lists(LABEL, max_size=25))
def test_placed_labels_never_overlap_each_other_or_an_obstacle(obstacles, labels):
    centres = maplabels.place(obstacles, labels)

    assert len(centres) == len(labels)
    placed = [
        (x - label.w / 2, y - label.h / 2, label.w, label.h) for (x, y), label in zip(centres, labels, strict=True)
    ]
    for a, b in itertools.combinations(placed, 2):
        assert not maplabels.overlap(a, b, maplabels.GAP - 1e-6), (a, b)
    for label, obstacle in itertools.product(placed, obstacles):
        assert not maplabels.overlap(label, obstacle, maplabels.GAP - 1e-6), (label, obstacle)


def test_a_label_with_room_sits_on_the_middle_of_its_arrow_and_needs_no_leader():
    label = maplabels.Label(((0.0, 0.0), (0.0, 200.0)), 60.0)

    [centre] = maplabels.place([], [label])

    assert centre == (0.0, 100.0)
    assert maplabels.leader(centre, (label.w, label.h), label.path) is None


def test_a_label_pushed_off_its_arrow_is_joined_to_it_by_a_leader_from_its_edge():
    path = ((0.0, 0.0), (0.0, 40.0))
    wall = (-300.0, -30.0, 600.0, 100.0)  # covers the arrow and all around it
    label = maplabels.Label(path, 60.0)

    [(x, y)] = maplabels.place([wall], [label])

    assert not maplabels.overlap((x - 30, y - 7.5, 60, 15), wall)
    start, end = maplabels.leader((x, y), (60.0, 15.0), path)
    assert end == maplabels.nearest(path, (x, y))
    assert abs(start[0] - x) == 30 or abs(start[1] - y) == 7.5  # it starts on the label's edge


def test_label_width_is_never_narrower_than_the_wide_font_needs():
    # DejaVu Sans Bold at 12 px (Debian's Chromium): digits 8.4 px, "%" 12 px; 2 px of room either side.
    assert maplabels.label_width("12 · 25% failed") >= 95


def _team(routes):
    rows = [RouteRow(ROOT, a, b, "routes/1", verdict, False, n) for a, b, verdict, n in routes]
    return build(rows, {"routes/1": {(a, b) for a, b, _, _ in routes}})


def test_the_labels_of_routes_taken_both_ways_and_of_a_wide_fan_out_do_not_overlap():
    routes = [("triage", "sales", "HEALTHY", 40), ("sales", "triage", "FALSE_COMPLETE", 3)]
    routes += [("triage", receiver, "HEALTHY", 12) for receiver in ("coder", "refunds", "shipping", "legal", "returns")]
    routes += [(receiver, "triage", "TOOL_PROTOCOL", 1) for receiver in ("coder", "refunds", "shipping")]

    _assert_apart(draw(_team(routes)))


def test_the_labels_of_a_twelve_agent_team_with_routes_both_ways_do_not_overlap_and_say_the_failure_rate():
    drawing = draw(_team(twelve_agents_both_ways()))

    assert len(drawing.arrows) == 22
    _assert_apart(drawing)
    failing = next(a for a in drawing.arrows if (a.route.sender, a.route.receiver) == ("agent-01", "agent-00"))
    assert failing.text == "1 · 100% failed"
    assert failing.name.startswith("1 · 100% failed; agent-01 → agent-00: 1 handoff")
