"""The words on the team map's arrows: what they count, and that they stay inside the drawing."""

from __future__ import annotations

from receipts.queries.teammap import ROOT, RouteRow, build
from sidewisp.pages.mapdrawing import arrow_text, draw, label_width, verdict_text

ROUTES = {"routes/1": {("triage", "sales")}}


def row(sender: str, receiver: str, verdict: str, version: str = "routes/1", count: int = 1) -> RouteRow:
    return RouteRow(ROOT, sender, receiver, version, verdict, False, count)


def route_of(team, sender: str, receiver: str):
    return next(r for r in team.routes if (r.sender, r.receiver) == (sender, receiver))


def test_an_arrow_with_one_undeclared_handoff_of_nine_says_so_after_its_count():
    team = build([row("triage", "sales", "HEALTHY", count=8), row("triage", "sales", "TOOL_PROTOCOL", "")], ROUTES)

    assert arrow_text(route_of(team, "triage", "sales")) == "9 · 11% failed · 1 undeclared"
    assert verdict_text(route_of(team, "triage", "sales")) == "9: 8 ✓ / 1 ✗ · 1 undeclared"


def test_an_arrow_whose_every_handoff_is_undeclared_leads_with_undeclared():
    team = build([row("triage", "billing", "HEALTHY", count=2)], ROUTES)

    assert arrow_text(route_of(team, "triage", "billing")) == "undeclared: 2 · 0% failed"


def test_every_arrow_label_fits_inside_the_drawing_even_when_wider_than_the_agents():
    # A chain of short names is one narrow column; its long labels, centred on their arrows, would overhang both sides.
    rows = [row("a", "b", "HEALTHY", count=50), row("a", "b", "TOOL_PROTOCOL", "", count=40)]
    rows += [row("b", "c", "WAITING_ON_APPROVAL", count=3), row("b", "c", "STALE_CONTROL", count=3)]
    drawing = draw(build(rows, {"routes/1": {("a", "b")}}))

    for arrow in drawing.arrows:
        half = label_width(arrow.text) / 2
        assert half <= arrow.label_x <= drawing.width - half, (arrow.text, arrow.label_x, drawing.width)
    for node in drawing.nodes:
        assert 0 <= node.x and node.x + node.w <= drawing.width
    # The arrows still start and end at their agents after the drawing moved.
    a, b = (next(n for n in drawing.nodes if n.name == name) for name in ("a", "b"))
    first = next(arrow for arrow in drawing.arrows if arrow.route.receiver == "b")
    assert a.x <= first.points[0][0] <= a.x + a.w and b.x <= first.points[-1][0] <= b.x + b.w
