"""The overview's rollup under the team scope (issue 20 §4, issue 22 §2): a team's long window counts exactly
its own handoffs, as a live count under the same scope does, and a graph or source that changes hands (or a
run whose graph changes) moves its counts at once. The scope read once per request (`Scope.resolved`) finds the
same runs as its subqueries."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db.models import Count
from django.urls import reverse
from django.utils import timezone

from receipts.models import Handoff, Run, TeamGraph, TeamSource
from receipts.org import teams
from receipts.queries import dashboard, rollups

pytestmark = pytest.mark.django_db
VERDICTS = ("HEALTHY", "FALSE_COMPLETE", "UNCERTAIN", "ROUTE_REJECTED", "WAITING_ON_APPROVAL")
# Local runs of alpha's, beta's and an unclaimed graph; remote runs of beta's and an unclaimed source.
OWNERS = (("alpha-graph", ""), ("beta-graph", ""), ("loose-graph", ""), ("", "beta-source"), ("", "loose-source"))


@pytest.fixture
def world(make_team, person):
    """alpha and beta teams with a member each, an admin, a default-team user; 90 handoffs over 9 days."""
    alpha = make_team("alpha", graphs=["alpha-graph"])
    beta = make_team("beta", graphs=["beta-graph"], sources=["beta-source"])
    users = {"ann": person("ann", "operator"), "bob": person("bob", "operator"), "dee": person("dee", "operator")}
    teams.add_member(users["ann"], alpha)
    teams.add_member(users["bob"], beta)
    users["boss"] = person("boss", "admin")
    rng, now = random.Random(11), timezone.now()
    for n in range(90):
        graph, source = OWNERS[n % len(OWNERS)]
        run = Run.objects.create(operation_id=f"op-{n}", thread_id=f"th-{n}", graph=graph, source_name=source)
        at = now - timedelta(minutes=rng.randrange(9 * 24 * 60))
        Handoff.objects.create(handoff_id=f"h-{n}", run=run, verdict=rng.choice(VERDICTS), created_at=at)
    for handoff in rng.sample(list(Handoff.objects.all()), 30):  # verdicts that change after they were counted
        Handoff.objects.filter(pk=handoff.pk).update(verdict=rng.choice(VERDICTS))
    return users


def _live(user, since) -> dict[str, int]:
    window = teams.scope(Handoff.objects.filter(created_at__gte=since), user, run="run__").order_by()
    return dict(window.values_list("verdict").annotate(n=Count("pk")))


def _rolled(user, since) -> dict[str, int]:
    edges = rollups.trend_edges(since, timezone.now(), dashboard.SPARK_BUCKETS)
    return rollups.window_counts(since, edges, seen=teams.scope_for(user).resolved()).by_verdict


def _page(client, user, window: str) -> dict[str, int]:
    client.force_login(user)
    context = client.get(reverse("sidewisp:overview"), {"window": window}).context
    return {verdict: int(n) for verdict, n in context["counts"] if n}


@pytest.mark.parametrize("hours", [12, 24, 24 * 7])
@pytest.mark.parametrize("who", ["ann", "bob", "dee", "boss"])
def test_a_teams_long_window_counts_exactly_its_own_handoffs(world, who, hours):
    since = timezone.now() - timedelta(hours=hours, minutes=17)
    live = _live(world[who], since)
    for _ in ("deltas", "compacted"):
        assert _rolled(world[who], since) == live
        rollups.compact()
    assert sum(_live(world["boss"], since).values()) == sum(
        sum(_live(world[name], since).values()) for name in ("ann", "bob", "dee")
    )  # every handoff is one team's (the default team has the unclaimed ones)


@pytest.mark.parametrize("window", ["24h", "7d"])
def test_the_overview_of_a_team_shows_the_live_count_of_its_handoffs(client, world, window):
    since = timezone.now() - timedelta(hours=24 if window == "24h" else 24 * 7)
    for who in ("ann", "bob", "dee"):
        shown, live = _page(client, world[who], window), _live(world[who], since)
        assert shown == live, who  # the page's window starts a moment later: nothing is created meanwhile


def test_a_graph_moving_to_another_team_moves_its_counts(client, world):
    rollups.compact()
    since = timezone.now() - timedelta(days=7)
    ann_before, bob_before = _page(client, world["ann"], "7d"), _page(client, world["bob"], "7d")
    alpha_graph = sum(ann_before.values())
    assert alpha_graph > 0

    TeamGraph.objects.filter(graph="alpha-graph").update(team=TeamGraph.objects.get(graph="beta-graph").team)

    assert _page(client, world["ann"], "7d") == {}
    bob_after = _page(client, world["bob"], "7d")
    assert sum(bob_after.values()) == sum(bob_before.values()) + alpha_graph
    assert bob_after == _live(world["bob"], since)


def test_an_unclaimed_source_claimed_by_a_team_leaves_the_default_team(client, world):
    since = timezone.now() - timedelta(days=7)
    loose = _live(world["dee"], since)

    TeamSource.objects.create(team=TeamGraph.objects.get(graph="alpha-graph").team, source_name="loose-source")

    assert sum(_page(client, world["dee"], "7d").values()) < sum(loose.values())
    for who in ("ann", "dee"):
        assert _page(client, world[who], "7d") == _live(world[who], since), who


def test_a_run_whose_graph_changes_moves_its_handoffs_counts(client, world):
    rollups.compact()
    since = timezone.now() - timedelta(days=7)
    moved = Run.objects.filter(graph="loose-graph").update(graph="alpha-graph")  # a bulk UPDATE of the runs
    assert moved

    for _ in ("deltas", "compacted"):
        for who in ("ann", "dee", "boss"):
            assert _page(client, world[who], "7d") == _live(world[who], since), who
        rollups.compact()


def test_a_resolved_scope_finds_the_same_runs_as_its_subqueries(world):
    for user in world.values():
        for team in ["", *(slug for slug, _ in teams.switchable(user))]:
            seen = teams.scope_for(user, team)
            expected = set(seen.apply(Run.objects.all()).values_list("pk", flat=True))
            assert set(seen.resolved().apply(Run.objects.all()).values_list("pk", flat=True)) == expected
            assert set(seen.resolved().apply(Handoff.objects.all(), "run__").values_list("run", flat=True)) == (
                set(Handoff.objects.filter(run__in=expected).values_list("run", flat=True))
            )
