"""Teams (issue 22 §2): memberships from the claim and locally, which runs a team owns, the one scope."""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth.models import AnonymousUser

from receipts.models import Membership, Run, Team
from receipts.org import teams


@pytest.fixture
def alpha(make_team):
    return make_team("alpha", graphs=["alpha-graph"], sources=["alpha-remote"])


@pytest.fixture
def beta(make_team):
    return make_team("beta", graphs=["beta-graph"])


def _run(operation_id: str, graph: str = "", source_name: str = "") -> Run:
    return Run.objects.create(operation_id=operation_id, thread_id=operation_id, graph=graph, source_name=source_name)


def _seen(user, **kwargs) -> set[str]:
    return set(teams.visible_runs(user, **kwargs).values_list("operation_id", flat=True))


@pytest.fixture
def runs(alpha, beta):
    _run("op-alpha", "alpha-graph")
    _run("op-alpha-remote", "whatever", source_name="alpha-remote")
    _run("op-beta", "beta-graph")
    _run("op-unclaimed", "demo")
    _run("op-unclaimed-remote", source_name="nobodys-remote")


def test_the_migration_made_one_default_team(db):
    default = teams.default_team()
    assert default is not None and default.slug == "default" and default.owns_unclaimed


def test_claimed_memberships_follow_the_claim_exactly_and_local_ones_stay(person, alpha, beta):
    gamma = Team.objects.create(slug="gamma", name="Gamma")
    user = person("dana", "viewer")
    teams.add_member(user, gamma)
    teams.set_claimed_teams(user, ["alpha", "beta"])
    assert set(teams.teams_of(user).values_list("slug", flat=True)) == {"alpha", "beta", "gamma"}

    teams.set_claimed_teams(user, ["beta", "gamma"])  # alpha removed at the identity provider
    assert set(teams.teams_of(user).values_list("slug", flat=True)) == {"beta", "gamma"}
    assert Membership.objects.get(user=user, team=gamma).origin == Membership.Origin.LOCAL

    teams.set_claimed_teams(user, [])
    assert set(teams.teams_of(user).values_list("slug", flat=True)) == {"gamma"}


def test_unknown_claimed_slugs_are_ignored_and_logged_without_their_values(person, alpha, caplog):
    user = person("dana", "viewer")
    with caplog.at_level(logging.WARNING, logger="receipts.org.teams"):
        teams.set_claimed_teams(user, ["alpha", "secret-project-x"])
    assert list(teams.teams_of(user).values_list("slug", flat=True)) == ["alpha"]
    assert "1 value(s) name no team" in caplog.text
    assert "secret-project-x" not in caplog.text


def test_a_member_sees_only_the_runs_of_their_teams_graphs_and_sources(person, runs, alpha):
    user = person("ann", "viewer")
    teams.add_member(user, alpha)
    assert _seen(user) == {"op-alpha", "op-alpha-remote"}


def test_a_user_in_no_team_is_in_the_default_team_which_owns_unclaimed_runs(person, runs):
    user = person("newcomer", "viewer")
    assert list(teams.teams_of(user).values_list("slug", flat=True)) == ["default"]
    assert _seen(user) == {"op-unclaimed", "op-unclaimed-remote"}


def test_a_member_of_the_default_team_and_another_sees_both(person, runs, beta):
    user = person("bo", "viewer")
    teams.add_member(user, beta)
    teams.add_member(user, teams.default_team())
    assert _seen(user) == {"op-beta", "op-unclaimed", "op-unclaimed-remote"}


def test_an_admin_sees_every_run_and_a_superuser_too(person, runs, django_user_model):
    assert len(_seen(person("root", "admin"))) == 5
    superuser = django_user_model.objects.create_superuser("su", password=None)
    assert len(_seen(superuser)) == 5


def test_the_switch_narrows_to_one_of_the_users_teams(person, runs, alpha, beta):
    user = person("ann", "viewer")
    teams.add_member(user, alpha)
    teams.add_member(user, beta)
    assert _seen(user, team="beta") == {"op-beta"}


def test_the_switch_refuses_a_team_that_is_not_the_users(person, runs, alpha, beta):
    user = person("ann", "viewer")
    teams.add_member(user, alpha)
    with pytest.raises(teams.UnknownTeam, match="not one of yours"):
        teams.visible_runs(user, team="beta")
    with pytest.raises(teams.UnknownTeam):
        teams.visible_runs(user, team="no-such-team")


def test_the_owner_of_a_run_is_its_sources_team_else_its_graphs_else_the_default(runs, alpha, beta):
    assert teams.owner_of(Run.objects.get(operation_id="op-alpha-remote")) == alpha
    assert teams.owner_of(Run.objects.get(operation_id="op-beta")) == beta
    assert teams.owner_of(Run.objects.get(operation_id="op-unclaimed")).slug == "default"


def test_members_of_a_team_include_the_teamless_only_for_the_default_team(person, alpha):
    ann, newcomer = person("ann", "viewer"), person("newcomer", "viewer")
    teams.add_member(ann, alpha)
    users = type(ann).objects.all()
    assert list(teams.members_of(Team.objects.filter(pk=alpha.pk), users)) == [ann]
    assert list(teams.members_of(Team.objects.filter(owns_unclaimed=True), users)) == [newcomer]


def test_scoping_runs_no_query_of_its_own(person, runs, alpha, django_assert_num_queries):
    user = person("ann", "viewer")
    teams.add_member(user, alpha)
    user.get_all_permissions()  # the permission cache every view fills first
    with django_assert_num_queries(1):
        assert len(list(teams.visible_runs(user))) == 2


def test_the_search_offers_only_the_graphs_of_runs_the_user_sees(person, runs, alpha):
    from receipts.queries import dashboard

    user = person("ann", "viewer")
    teams.add_member(user, alpha)
    graphs, _ = dashboard.search_choices(seen=teams.scope_for(user))
    assert graphs == ["alpha-graph", "whatever"]
    everything, _ = dashboard.search_choices()
    assert everything == ["alpha-graph", "beta-graph", "demo", "whatever"]


def test_a_scope_read_once_for_a_render_sees_exactly_the_runs_its_subqueries_see(person, runs, alpha, beta):
    # `resolved_scopes` (the live pages' renders): the teams' graphs and sources as values, the same rows.
    member, both, teamless = person("ann", "viewer"), person("bo", "viewer"), person("newcomer", "viewer")
    teams.add_member(member, alpha)
    teams.add_member(both, beta)
    teams.add_member(both, teams.default_team())
    cases = [(member, ""), (both, ""), (both, "beta"), (teamless, ""), (person("root", "admin"), "alpha")]
    for user, team in cases:
        with teams.resolved_scopes():
            resolved = _seen(user, team=team)
        assert resolved == _seen(user, team=team), (user.username, team)
    with teams.resolved_scopes():
        assert _seen(AnonymousUser()) == set() == _seen(AnonymousUser())
    teams.default_team().delete()  # a user in no team still sees the runs no team claims
    with teams.resolved_scopes():
        assert _seen(teamless) == {"op-unclaimed", "op-unclaimed-remote"} == _seen(teamless)
    Team.objects.filter(slug="beta").delete()  # no team claims beta's graph now: the teamless see it
    with teams.resolved_scopes():
        assert _seen(teamless) == {"op-beta", "op-unclaimed", "op-unclaimed-remote"} == _seen(teamless)


def test_the_runs_hidden_from_an_audience_are_asked_with_sql_compiled_once_per_size(person, runs, alpha, beta):
    from receipts.queries import compiled

    by_name = dict(Run.objects.values_list("operation_id", "pk"))
    ids = [by_name[name] for name in ("op-alpha", "op-beta", "op-unclaimed")]  # three: padded to four slots
    member = person("ann", "viewer")
    teams.add_member(member, alpha)
    compiled.forget()
    hidden = teams.hidden_from_audience((teams.audience_key(member),), ids)
    assert hidden == {by_name["op-beta"], by_name["op-unclaimed"]}
    teamless = (teams.audience_key(person("newcomer", "viewer")),)  # an audience ends with its team key
    assert teams.hidden_from_audience(teamless, ids) == {by_name["op-alpha"], by_name["op-beta"]}
    kept = len(compiled._kept)
    assert teams.hidden_from_audience(teamless, ids[:1] + ids[2:] + ids[:1]) == {by_name["op-alpha"]}
    assert teams.hidden_from_audience(teamless, []) == set() and len(compiled._kept) == kept
