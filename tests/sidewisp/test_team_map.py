"""The team map page (/map/) and the run page's map: counts, colours, boxes, links, cost and who sees it."""

from __future__ import annotations

import re
import uuid
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from receipts.models import Handoff, Run
from sidewisp import pages

pytestmark = pytest.mark.django_db

MAP = reverse("sidewisp:map")
FAILING = ("ROUTE_REJECTED", "STALE_CONTROL", "CONTEXT_INCOMPLETE", "FALSE_COMPLETE", "UNCERTAIN")


# --- reading the drawn map back ------------------------------------------------------------------


class _Map(HTMLParser):
    """The SVG's arrows, nodes and boxes with their attributes, and each arrow's label text."""

    def __init__(self) -> None:
        super().__init__()
        self.arrows: list[dict] = []
        self.nodes: list[dict] = []
        self.boxes: list[dict] = []
        self._open: dict | None = None
        self._rect_for: list | None = None
        self._in_text = False

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        classes = (found.get("class") or "").split()
        if tag == "a" and "map-route" in classes:
            self._open = {**found, "classes": classes, "label": ""}
            self.arrows.append(self._open)
        elif tag == "a" and "map-node" in classes:
            self._rect_for = self.nodes
            self.nodes.append(found)
        elif tag == "g" and "map-box" in classes:
            self._rect_for = self.boxes
            self.boxes.append(found)
        elif tag == "rect" and self._rect_for is not None:
            self._rect_for[-1].update({k: float(found[k]) for k in ("x", "y", "width", "height")})
            self._rect_for = None
        elif tag == "text" and self._open is not None:
            self._in_text = True

    def handle_endtag(self, tag):
        if tag == "text":
            self._in_text = False
        elif tag == "a":
            self._open = None

    def handle_data(self, data):
        if self._in_text and self._open is not None:
            self._open["label"] += data


def read_map(html: str) -> _Map:
    found = _Map()
    found.feed(html)
    return found


def arrows_by_route(drawn: _Map) -> dict[tuple[str, str], dict]:
    return {(a["data-scope"], a["data-route"]): a for a in drawn.arrows}


# --- handoffs written straight to the database (the map reads rows, not receipts) -----------------


def make_handoffs(specs, *, created_at=None) -> list[Run]:
    """One run per spec list entry's `run` index; each spec is (run, scope, sender, receiver, version, verdict,
    in_progress)."""
    now = created_at or datetime.now(UTC)
    runs = {}
    for index in sorted({spec[0] for spec in specs}):
        runs[index] = Run.objects.create(
            operation_id=f"op-{uuid.uuid4().hex[:10]}", thread_id=uuid.uuid4().hex, created_at=now
        )
    Handoff.objects.bulk_create(
        Handoff(
            handoff_id=f"h-{uuid.uuid4().hex[:12]}",
            run=runs[run],
            sender=sender,
            receiver=receiver,
            route_version=version,
            verdict=verdict,
            reduced_part={"graph_scope": scope},
            # In progress: the destination is still due and the handoff not settled (receipts.ingest.health).
            destination_part=None if in_progress else {"node_id": receiver},
            settled_at=None if in_progress else now,
            created_at=now,
        )
        for run, scope, sender, receiver, version, verdict, in_progress in specs
    )
    return list(runs.values())


def reference(specs, declared: dict[str, set[tuple[str, str]]]) -> dict[tuple[str, str], dict]:
    """The map's counts, recounted in plain Python from the specs."""
    found: dict[tuple[str, str], dict] = defaultdict(Counter)
    for _, scope, sender, receiver, version, verdict, in_progress in specs:
        counts = found[(scope, f"{sender} → {receiver}")]
        counts["total"] += 1
        if in_progress:
            counts["in_progress"] += 1
        elif verdict == "HEALTHY":
            counts["healthy"] += 1
        elif verdict == "WAITING_ON_APPROVAL":
            counts["waiting"] += 1
        else:
            counts["failing"] += 1
        if (sender, receiver) not in declared.get(version, set()):
            counts["undeclared"] += 1
    return found


def expected_label(counts: Counter) -> str:
    """The arrow's words (issue 30 §2): its handoffs and the whole percentage of them that failed."""
    share = round(100 * counts["failing"] / counts["total"])
    rate = "<1%" if counts["failing"] and not share else f"{share}%"
    rate = ">99%" if counts["failing"] < counts["total"] and share == 100 else rate
    text = f"{counts['total']} · {rate} failed"
    if counts["undeclared"] == counts["total"]:
        return f"undeclared: {text}"
    return f"{text} · {counts['undeclared']} undeclared" if counts["undeclared"] else text


def expected_verdicts(counts: Counter) -> str:
    """The route's handoffs by verdict, as the table of routes shows them."""
    marks = [(counts["healthy"], "✓"), (counts["waiting"], "◔"), (counts["in_progress"], "…"), (counts["failing"], "✗")]
    parts = [f"{n} {mark}" for n, mark in marks if n]
    text = " / ".join(parts) if len(parts) == 1 else f"{counts['total']}: {' / '.join(parts)}"
    if counts["undeclared"] == counts["total"]:
        return f"undeclared: {text}"
    return f"{text} · {counts['undeclared']} undeclared" if counts["undeclared"] else text


def expected_state(counts: Counter) -> str:
    if counts["undeclared"]:
        return "undeclared"
    if counts["failing"]:
        return "failing"
    if counts["waiting"]:
        return "waiting"
    return "in_progress" if counts["in_progress"] else "healthy"


def declared_routes(contracts) -> dict[str, set[tuple[str, str]]]:
    return {
        version: {(s, r) for s, receivers in routes.items() for r in receivers}
        for version, routes in contracts.routes.items()
    }


# --- the counts are the database's -----------------------------------------------------------------

AGENTS = st.sampled_from(["triage", "sales", "support", "billing", "coder"])
SPEC = st.tuples(
    st.integers(0, 3),
    st.sampled_from(["parent", "parent", "team", "team/inner"]),
    AGENTS,
    AGENTS,
    st.sampled_from(["routes/1", "routes/3", "routes/9"]),
    st.sampled_from(["HEALTHY", "HEALTHY", "WAITING_ON_APPROVAL", *FAILING, "DESTINATION_NOT_STARTED"]),
    st.booleans(),
).map(lambda s: (*s[:6], s[6] and s[5] == "DESTINATION_NOT_STARTED"))


@hypothesis_settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.lists(SPEC, min_size=1, max_size=25))
def test_every_arrow_shows_the_count_verdict_mix_and_state_of_a_python_recount(viewer_client, contracts, specs):
    Handoff.objects.all().delete()
    Run.objects.all().delete()
    make_handoffs(specs)

    page = viewer_client.get(f"{MAP}?window=7d").content.decode()
    drawn = arrows_by_route(read_map(page))
    table = {
        (scope, route): cells
        for route, scope, cells in re.findall(r'<tr data-route="([^"]*)" data-scope="([^"]*)">(.*?)</tr>', page, re.S)
    }

    expected = reference(specs, declared_routes(contracts))
    taken = {key: arrow for key, arrow in drawn.items() if arrow["data-count"] != "0"}
    assert {key: int(arrow["data-count"]) for key, arrow in taken.items()} == {
        key: counts["total"] for key, counts in expected.items()
    }
    for key, counts in expected.items():
        assert taken[key]["label"] == expected_label(counts), key
        assert table[key].endswith(f"<td>{counts['total']}</td><td>{expected_verdicts(counts)}</td>"), key
        assert f"route-{expected_state(counts)}" in taken[key]["classes"], key
    assert all(
        "route-unused" in a["classes"] and a["label"] == "unused" for a in drawn.values() if a["data-count"] == "0"
    )


def test_the_map_counts_only_the_runs_created_in_the_chosen_window(viewer_client, contracts):
    make_handoffs([(0, "parent", "triage", "sales", "routes/1", "HEALTHY", False)])
    make_handoffs(
        [(0, "parent", "triage", "sales", "routes/1", "HEALTHY", False)],
        created_at=datetime.now(UTC) - timedelta(hours=3),
    )

    hour = arrows_by_route(read_map(viewer_client.get(f"{MAP}?window=1h").content.decode()))
    day = arrows_by_route(read_map(viewer_client.get(f"{MAP}?window=24h").content.decode()))

    assert hour[("parent", "triage → sales")]["data-count"] == "1"
    assert day[("parent", "triage → sales")]["data-count"] == "2"


# --- what the picture says -------------------------------------------------------------------------


def test_an_undeclared_route_is_drawn_in_the_failure_colour_with_its_words(viewer_client, contracts):
    make_handoffs([(0, "parent", "triage", "coder", "routes/1", "ROUTE_REJECTED", False)])

    page = viewer_client.get(f"{MAP}?window=1h").content.decode()

    arrow = arrows_by_route(read_map(page))[("parent", "triage → coder")]
    assert "route-undeclared" in arrow["classes"]
    assert arrow["label"] == "undeclared: 1 · 100% failed"
    assert arrow["aria-label"].startswith("undeclared: 1 · 100% failed; triage → coder")  # the words shown, first
    assert "not declared by their route version" in arrow["aria-label"]
    css = _css()
    assert re.search(r"\.route-undeclared polyline[^{]*\{[^}]*stroke: var\(--bad\)", css)


def test_a_declared_route_nobody_took_is_dashed_and_says_unused(viewer_client, contracts):
    make_handoffs([(0, "parent", "triage", "sales", "routes/1", "HEALTHY", False)])

    arrow = arrows_by_route(read_map(viewer_client.get(MAP).content.decode()))[("parent", "sales → billing")]

    assert "route-unused" in arrow["classes"] and arrow["label"] == "unused"
    assert re.search(r"\.route-unused polyline[^{]*\{[^}]*stroke-dasharray", _css())


def test_a_nested_team_is_drawn_as_a_box_around_its_agents(viewer_client, contracts):
    make_handoffs(
        [
            (0, "team", "alice", "bob", "routes/1", "HEALTHY", False),
            (0, "team/inner", "x", "y", "routes/1", "HEALTHY", False),
        ]
    )

    drawn = read_map(viewer_client.get(MAP).content.decode())

    boxes = {box["data-scope"]: box for box in drawn.boxes}
    assert set(boxes) == {"team", "team/inner"}
    for node in drawn.nodes:
        if node["data-scope"] in boxes:
            assert _inside(node, boxes[node["data-scope"]]), node["data-agent"]
    assert _inside(boxes["team/inner"], boxes["team"])


def _inside(inner: dict, outer: dict) -> bool:
    return (
        outer["x"] <= inner["x"]
        and outer["y"] <= inner["y"]
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"]
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"]
    )


def test_the_map_has_a_title_a_description_and_a_table_of_every_route(viewer_client, contracts):
    make_handoffs([(0, "parent", "triage", "sales", "routes/1", "STALE_CONTROL", False)])

    page = viewer_client.get(MAP).content.decode()

    assert '<title id="team-map-svg-title">' in page and '<desc id="team-map-svg-desc">' in page
    assert "triage to sales: failing" in page
    row = re.search(r'<tr data-route="triage → sales"[^>]*>(.*?)</tr>', page, re.S).group(1)
    assert "Failing" in row and "1 ✗" in row


def _css() -> str:
    return (Path(settings.BASE_DIR) / "static" / "css" / "teammap.css").read_text()


# --- who sees it ---------------------------------------------------------------------------------------


def test_a_viewer_sees_the_map_from_the_main_navigation(viewer_client, contracts):
    page = viewer_client.get(reverse("sidewisp:overview")).content.decode()
    assert f'href="{MAP}"' in page

    response = viewer_client.get(MAP)

    assert response.status_code == 200
    assert 'id="team-map"' in response.content.decode()


def test_someone_without_the_viewer_permission_is_refused_and_a_visitor_sent_to_log_in(client, outsider):
    assert client.get(MAP).status_code == 302
    client.force_login(outsider)
    assert client.get(MAP).status_code == 403


# --- clicking: every arrow and node is a real link to the filtered runs list ----------------------------


def test_an_arrow_lists_exactly_the_runs_with_a_handoff_over_its_route(viewer_client, contracts):
    over = make_handoffs([(0, "parent", "triage", "sales", "routes/1", "HEALTHY", False)])[0]
    elsewhere = make_handoffs([(0, "parent", "triage", "support", "routes/1", "HEALTHY", False)])[0]
    reversed_route = make_handoffs([(0, "parent", "sales", "triage", "routes/1", "HEALTHY", False)])[0]

    drawn = read_map(viewer_client.get(f"{MAP}?window=24h").content.decode())
    arrow = arrows_by_route(drawn)[("parent", "triage → sales")]
    link = urlsplit(arrow["href"])
    assert link.path == reverse("sidewisp:runs")
    assert parse_qs(link.query) == {"sender": ["triage"], "receiver": ["sales"], "window": ["24h"]}

    listed = viewer_client.get(arrow["href"]).content.decode()
    assert over.operation_id in listed
    assert elsewhere.operation_id not in listed and reversed_route.operation_id not in listed


def test_a_node_lists_the_runs_its_agent_sent_or_received_in(viewer_client, contracts):
    billing = make_handoffs([(0, "parent", "sales", "billing", "routes/1", "HEALTHY", False)])[0]
    other = make_handoffs([(0, "parent", "triage", "support", "routes/1", "HEALTHY", False)])[0]

    node = next(n for n in read_map(viewer_client.get(MAP).content.decode()).nodes if n["data-agent"] == "billing")
    assert parse_qs(urlsplit(node["href"]).query) == {"agent": ["billing"], "window": ["1h"]}

    listed = viewer_client.get(node["href"]).content.decode()
    assert billing.operation_id in listed and other.operation_id not in listed


# --- cost ------------------------------------------------------------------------------------------------


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_map_runs_as_many_queries_for_40_runs_as_for_2(viewer_client, contracts):
    spec = [(i, "parent", "triage", "sales", "routes/1", "HEALTHY", False) for i in range(2)]
    make_handoffs(spec)
    few = _queries(viewer_client, f"{MAP}?window=7d")

    many = [
        (i, scope, "triage", r, "routes/1", "STALE_CONTROL", False)
        for i in range(40)
        for scope in ("parent", "team")
        for r in ("sales", "coder")
    ]
    make_handoffs(many)

    assert _queries(viewer_client, f"{MAP}?window=7d") == few


def test_the_run_pages_map_runs_as_many_queries_for_20_handoffs_as_for_1(viewer_client, contracts):
    small = make_handoffs([(0, "parent", "triage", "sales", "routes/1", "HEALTHY", False)])[0]
    twenty = [(0, "parent", "triage", receiver, "routes/1", "HEALTHY", False) for receiver in ["sales", "support"] * 10]
    big = make_handoffs(twenty)[0]
    url = lambda run: reverse("sidewisp:run-detail", args=[run.pk])  # noqa: E731
    _queries(viewer_client, url(small))  # the graph's wiring is read once per process

    assert _queries(viewer_client, url(big)) == _queries(viewer_client, url(small))


# --- the run page's map ---------------------------------------------------------------------------------


def test_the_run_page_draws_the_path_its_run_took_in_order(viewer_client, record_handoff):
    record_handoff("h-path-1", "op-path", "healthy")
    record_handoff("h-path-2", "op-path", "waiting", sender="sales", receiver="billing")
    run = Run.objects.get(operation_id="op-path")

    page = viewer_client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode()

    arrows = arrows_by_route(read_map(page))
    assert "The path this run took" in page
    assert arrows[("parent", "triage → sales")]["label"] == "#1 1 · 0% failed"
    assert arrows[("parent", "sales → billing")]["label"] == "#2 1 · 0% failed"
    assert arrows[("parent", "triage → support")]["label"] == "unused"


# --- live ------------------------------------------------------------------------------------------------


def test_the_map_is_a_live_page_whose_render_is_the_map_fragment_out_of_band(viewer, contracts):
    make_handoffs([(0, "parent", "triage", "sales", "routes/1", "HEALTHY", False)])
    scope = pages.PageScope.from_query_string("page=map&filters=window%3D24h")

    rendered = pages.render_live(scope, viewer)

    assert scope == pages.PageScope("map", query="window=24h")
    assert len(rendered.fragments) == 1
    assert 'id="team-map"' in rendered.fragments[0] and 'hx-swap-oob="true"' in rendered.fragments[0]
    assert 'data-route="triage → sales"' in rendered.fragments[0]


def test_the_map_page_connects_its_socket_with_its_window(viewer_client, contracts):
    page = viewer_client.get(f"{MAP}?window=15m").content.decode()

    assert 'ws-connect="/ws/health/?page=map&amp;filters=window%3D15m"' in page
