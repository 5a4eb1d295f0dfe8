"""The team map's drawing time: lay out and render a map of 50 agents and 200 routes (goal: under 100 ms).

The routes are 200 distinct sender → receiver pairs drawn at random (fixed seed) between 50 agents, every one
taken with a mix of verdicts, plus 20 declared routes nobody took: a flat team, the layout's hardest case. A
second map puts the same 50 agents in five nested teams (boxes) with the routes inside them. Timed per map:
`receipts.queries.teammap.build` (the counts as the grouped query returns them, no database), the grandalf layout
(`sidewisp.pages.mapdrawing.draw`) and the template (`teammap/_map.html`); p50/p95 over the repeats. Printed, never
judged.

    python -m bench.map [--quick] [--agents 50] [--routes 200] [--repeats 30]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from bench import sizes
from bench.table import Row, markdown, versus

AGENTS = 50
ROUTES = 200
REPEATS = 30
QUICK_REPEATS = 5
GOAL_MS = 100
GOAL = f"< {GOAL_MS} ms to lay out and render"
VERDICTS = ("HEALTHY", "HEALTHY", "HEALTHY", "WAITING_ON_APPROVAL", "STALE_CONTROL", "ROUTE_REJECTED")


def team_rows(agents: int, routes: int, *, teams: int = 0, seed: int = 21):
    """The grouped query's rows for `routes` random routes between `agents` agents (in `teams` nested teams
    when given), and the contract that declares most of them plus a few nobody takes."""
    from receipts.queries.teammap import ROOT, RouteRow

    rng = random.Random(seed)
    names = [f"agent-{i:02d}" for i in range(agents)]
    teams = min(teams, agents // 2)
    scope_of = {name: (f"team-{i % teams}" if teams else ROOT) for i, name in enumerate(names)}
    candidates = [(s, r) for s in names for r in names if s != r and scope_of[s] == scope_of[r]]
    pairs = rng.sample(candidates, min(routes, len(candidates)))
    rows = [
        RouteRow(scope_of[s], s, r, "routes/1", rng.choice(VERDICTS), False, rng.randint(1, 40))
        for s, r in sorted(pairs)
    ]
    # 90 % of the routes taken are declared, and a tenth as many again declared that nobody takes.
    declared = set(sorted(pairs)[: int(len(pairs) * 0.9)])
    unused = [pair for pair in candidates if pair not in set(pairs)]
    declared |= set(rng.sample(unused, min(len(unused), len(pairs) // 10)))
    return rows, {"routes/1": declared}


def measure(agents: int, routes: int, repeats: int, *, teams: int = 0) -> dict[str, list[float]]:
    from django.template.loader import render_to_string

    from receipts.queries import teammap
    from sidewisp.pages import mapdrawing, mappage

    rows, declared = team_rows(agents, routes, teams=teams)
    times: dict[str, list[float]] = {"build": [], "layout": [], "render": [], "total": []}
    for _ in range(repeats):
        started = time.perf_counter()
        team = teammap.build(rows, declared)
        built = time.perf_counter()
        drawing = mapdrawing.draw(team, route_href=lambda r: "/runs/?sender=a", agent_href=lambda n: "/runs/?agent=a")
        laid = time.perf_counter()
        view = mappage.MapView(drawing, team, "Routes of the team", "summary", "description", [])
        html = render_to_string("teammap/_map.html", {"map": view})
        done = time.perf_counter()
        times["build"].append((built - started) * 1000)
        times["layout"].append((laid - built) * 1000)
        times["render"].append((done - laid) * 1000)
        times["total"].append((done - started) * 1000)
    times["arrows"] = [float(html.count('class="map-route'))]
    return times


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _row(what: str, times: dict[str, list[float]], repeats: int) -> Row:
    median = statistics.median(times["total"])
    figure = f"{median:.0f} ms median, {_p(times['total'], 0.95):.0f} ms p95"
    parts = ", ".join(f"{k} {statistics.median(times[k]):.1f} ms" for k in ("build", "layout", "render"))
    note = f"median of {repeats}: {parts}; {int(times['arrows'][0])} arrows drawn; grandalf Sugiyama, Django template"
    return Row("map", what, figure, f"{GOAL}: {versus(median, GOAL_MS, 'the goal')}", note)


def rows(quick: bool, *, agents: int | None = None, routes: int | None = None, repeats: int | None = None) -> list[Row]:
    agents = agents or sizes.pick(quick, tiny=6, quick=AGENTS, full=AGENTS)
    routes = routes or sizes.pick(quick, tiny=8, quick=ROUTES, full=ROUTES)
    repeats = repeats or sizes.pick(quick, tiny=2, quick=QUICK_REPEATS, full=REPEATS)
    measure(agents, routes, 1)  # templates compiled and modules imported before the clock runs
    flat = measure(agents, routes, repeats)
    nested = measure(agents, routes, repeats, teams=5)
    return [
        _row(f"team map of {agents} agents and {routes} routes, one flat team", flat, repeats),
        _row(f"team map of {agents} agents and {routes} routes in 5 nested teams (boxes)", nested, repeats),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--agents", type=int, default=None, help=f"default {AGENTS}")
    parser.add_argument("--routes", type=int, default=None, help=f"default {ROUTES}")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    from bench.environment import setup_django

    setup_django()
    print(markdown(rows(args.quick, agents=args.agents, routes=args.routes, repeats=args.repeats)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
