"""The team map's facts (receipts.queries.teammap): routes taken and declared, nested teams, a hosted graph's wiring."""

from __future__ import annotations

import pytest

from receipts.queries.teammap import (
    FAILING,
    HEALTHY,
    ROOT,
    UNDECLARED,
    UNUSED,
    WAITING,
    GraphShape,
    RouteRow,
    build,
    read_shape,
)

ROUTES_1 = {"routes/1": {("triage", "sales"), ("triage", "support"), ("sales", "billing")}}


def row(sender: str, receiver: str, verdict: str = "HEALTHY", *, count: int = 1, scope: str | None = ROOT, **kw):
    return RouteRow(
        scope, sender, receiver, kw.get("version", "routes/1"), verdict, kw.get("in_progress", False), count
    )


def routes_of(team) -> dict[tuple[str, str, str], object]:
    return {route.key: route for route in team.routes}


def test_a_route_taken_counts_its_handoffs_by_verdict_and_says_the_worst():
    team = build([row("triage", "sales", count=3), row("triage", "sales", "ROUTE_REJECTED")], ROUTES_1)

    route = routes_of(team)[(ROOT, "triage", "sales")]
    assert (route.total, route.healthy, route.failing, route.state) == (4, 3, 1, FAILING)
    assert route.failing_verdicts == [("ROUTE_REJECTED", 1)]


def test_a_route_its_version_does_not_declare_is_undeclared_even_when_another_version_does():
    declared = {**ROUTES_1, "routes/3": {("triage", "coder")}}
    team = build([row("triage", "coder", version="routes/1"), row("triage", "coder", version="routes/3")], declared)

    route = routes_of(team)[(ROOT, "triage", "coder")]
    assert (route.undeclared, route.state) == (1, UNDECLARED)


def test_a_route_under_a_version_without_a_contract_is_undeclared():
    team = build([row("triage", "sales", version="routes/9")], {"routes/9": set()})

    assert routes_of(team)[(ROOT, "triage", "sales")].state == UNDECLARED


def test_declared_routes_nobody_took_are_drawn_unused_where_their_agents_are():
    team = build([row("triage", "sales")], ROUTES_1)

    routes = routes_of(team)
    assert routes[(ROOT, "sales", "billing")].state == UNUSED
    assert routes[(ROOT, "triage", "support")].declared
    assert team.nodes[ROOT] == ["billing", "sales", "support", "triage"]


def test_a_waiting_route_is_waiting_and_a_healthy_one_healthy():
    team = build([row("triage", "sales", "WAITING_ON_APPROVAL"), row("sales", "billing")], ROUTES_1)

    routes = routes_of(team)
    assert routes[(ROOT, "triage", "sales")].state == WAITING
    assert routes[(ROOT, "sales", "billing")].state == HEALTHY


def test_a_nested_team_is_a_scope_whose_box_is_a_node_of_the_scope_above():
    rows = [row("alice", "bob", scope="team"), row("x", "y", scope="team/inner"), row("triage", "team")]

    team = build(rows, {})

    assert team.nodes == {ROOT: ["team", "triage"], "team": ["alice", "bob", "inner"], "team/inner": ["x", "y"]}
    assert team.children(ROOT) == ["team"] and team.children("team") == ["team/inner"]


def test_a_fan_out_is_one_route_with_the_count_of_its_destinations():
    team = build([row("triage", "sales", count=3)], ROUTES_1)

    assert routes_of(team)[(ROOT, "triage", "sales")].total == 3


def test_a_handoff_without_a_scope_goes_where_its_sender_works():
    team = build([row("alice", "bob", scope="team"), row("alice", "carol", scope=None)], {})

    assert (("team", "alice", "carol")) in routes_of(team)


def test_routes_are_numbered_in_the_order_they_were_first_taken():
    from datetime import UTC, datetime

    first = RouteRow(ROOT, "sales", "billing", "routes/1", "HEALTHY", False, 1, datetime(2026, 1, 1, 10, tzinfo=UTC))
    second = RouteRow(ROOT, "triage", "sales", "routes/1", "HEALTHY", False, 1, datetime(2026, 1, 1, 9, tzinfo=UTC))

    routes = routes_of(build([first, second], ROUTES_1))

    assert (routes[(ROOT, "triage", "sales")].step, routes[(ROOT, "sales", "billing")].step) == (1, 2)
    assert routes[(ROOT, "triage", "support")].step == 0


# --- a hosted graph's wiring, as get_graph(xray=True) draws it --------------------------------------

XRAY = GraphShape(
    nodes=(
        ("__start__",),
        ("__end__",),
        ("intake",),
        ("intake", "model"),
        ("intake", "tools"),
        ("team", "__start__"),
        ("team", "alice", "model"),
        ("team", "alice", "tools"),
        ("team", "bob", "model"),
    ),
    edges=(
        (("__start__",), ("intake", "__start__")),
        (("intake", "model"), ("intake", "tools")),
        (("intake", "__end__"), ("team", "__start__")),
        (("team", "alice", "__end__"), ("team", "bob", "__start__")),
        (("team", "__end__"), ("__end__",)),
    ),
)


def test_an_agents_own_model_and_tools_stand_for_the_agent_and_a_teams_agents_go_in_its_box():
    nodes, edges = read_shape(XRAY, {ROOT, "team"})

    assert nodes == {(ROOT, "intake"), (ROOT, "team"), ("team", "alice"), ("team", "bob")}
    assert edges == {(ROOT, "intake", "team"), ("team", "alice", "bob")}


def test_a_hosted_graphs_wiring_adds_its_agents_and_routes_as_declared():
    team = build([row("alice", "bob", scope="team")], {}, [XRAY])

    routes = routes_of(team)
    assert routes[(ROOT, "intake", "team")].state == UNUSED and routes[(ROOT, "intake", "team")].declared
    assert team.nodes["team"] == ["alice", "bob"]


@pytest.mark.django_db
def test_the_demo_graph_reads_as_its_five_agents_and_their_transfers():
    from agents.host import teamshape

    nodes, edges = read_shape(teamshape.shape_of("demo", "coder_fixes_function"), {ROOT})

    assert {name for _, name in nodes} == {"triage", "sales", "support", "billing", "coder"}
    assert {(a, b) for _, a, b in edges} >= {("triage", "sales"), ("triage", "support"), ("sales", "billing")}
