"""Teams: who belongs to which team, and the one place that scopes every query to a user's teams.

A team owns graphs (by name: the local runs, hosted and observed, of that graph) and remote sources (the
runs their tokens created). A run of a remote source belongs to the source's owner; a local run belongs to
its graph's owner. The default team (`Team.owns_unclaimed`, made by migration 0023) owns every graph and
source no team claims, and a user in no team counts as its member: with no configuration everybody sees
everything, as before teams existed. Sidewisp's admins (`receipts.view_all_teams`, the admin role, and
superusers) see every team's runs.

Scoping is a filter made of subqueries, so it costs no query of its own and is fresh on every request:
`scope(queryset, user)` narrows any queryset whose rows name a run (`run=` is the path to it). An object
outside the scope is simply not found, so a view answers 404, never 403 (no existence oracle). A page of many
counts (the overview) reads the names the filter compares with once per request instead (`Scope.resolved`, one
query): the same rules, with lists of a few names in place of the subqueries; a live page's render does the same
for every scope it applies (`resolved_scopes`).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.contrib.auth.models import Permission
from django.core.cache import cache
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet

from receipts.models import Membership, Run, Team, TeamGraph, TeamSource
from receipts.org.owners import UNCLAIMED, Owners, resolution
from receipts.queries import compiled
from receipts.queries.compiled import slot

ADMIN_PERMISSION = "receipts.view_all_teams"
_ADMIN_CODENAME = ADMIN_PERMISSION.split(".")[1]
_GENERATION = "teams:generation"
SWITCH_SECONDS = 3600
logger = logging.getLogger(__name__)


class UnknownTeam(ValueError):
    """A `?team=` value that names none of the user's teams (the message names the problem, not the value)."""


# --- membership -------------------------------------------------------------------------


def set_claimed_teams(user, slugs: Iterable[str]) -> None:
    """Make the user's claimed memberships exactly the teams `slugs` names; local memberships are untouched.

    Called at every login through the identity provider. Slugs naming no team are ignored and counted in
    the log, never named (a claim's values are the identity provider's, not ours to log).
    """
    wanted = {slug for slug in slugs if isinstance(slug, str) and slug}
    known = dict(Team.objects.filter(slug__in=wanted).values_list("slug", "pk"))
    if unknown := len(wanted) - len(known):
        logger.warning("team claim: %d value(s) name no team; ignored", unknown)
    with transaction.atomic():
        mine = Membership.objects.filter(user=user)
        mine.filter(origin=Membership.Origin.CLAIM).exclude(team_id__in=known.values()).delete()
        held = set(mine.filter(team_id__in=known.values()).values_list("team_id", flat=True))
        claimed = [Membership(user=user, team_id=pk, origin=Membership.Origin.CLAIM) for pk in known.values()]
        Membership.objects.bulk_create([m for m in claimed if m.team_id not in held], ignore_conflicts=True)
    forget_switchable()  # bulk_create sends no post_save


def add_member(user, team: Team) -> None:
    """Make the user a local member of `team` (kept whatever the claim says)."""
    Membership.objects.update_or_create(user=user, team=team, defaults={"origin": Membership.Origin.LOCAL})


def default_team() -> Team | None:
    """The team that owns unclaimed graphs and teamless users, when there is one."""
    return Team.objects.filter(owns_unclaimed=True).first()


def sees_all(user) -> bool:
    """Whether the user sees and acts on every team's runs (an admin of Sidewisp, or a superuser)."""
    return bool(user is not None and user.is_authenticated and user.is_active and user.has_perm(ADMIN_PERMISSION))


def teams_of(user) -> QuerySet[Team]:
    """The teams the user is a member of: their memberships, or the default team when they have none."""
    if user is None or not user.is_authenticated:
        return Team.objects.none()
    return _teams_of_id(user.pk)


def _teams_of_id(user_id) -> QuerySet[Team]:
    # `user_id` a value, or a slot (`Scope.resolved`'s query compiled once).
    memberships = Membership.objects.filter(user_id=user_id)
    return Team.objects.filter(
        Q(pk__in=memberships.values("team_id")) | (Q(owns_unclaimed=True) & ~Exists(memberships))
    )


def members_of(teams: QuerySet[Team], users: QuerySet) -> QuerySet:
    """Those of `users` who are members of one of `teams` (the default team's teamless users included)."""
    memberships = Membership.objects.filter(user=OuterRef("pk"))
    in_team = Exists(memberships.filter(team__in=teams))
    teamless = Exists(teams.filter(owns_unclaimed=True)) & ~Exists(memberships)
    return users.filter(in_team | teamless)


# --- which runs a set of teams owns ----------------------------------------------------------


def owns_q(teams: QuerySet[Team], run: str = "", *, unclaimed=None) -> Q:
    """The rows whose run `teams` own; `run` is the path from the row to its run ("" for a Run, "run__").

    `unclaimed` (a condition) says whether the runs no team claims are included; by default, when one of
    `teams` is the default team.
    """
    owners = Owners(
        graphs=TeamGraph.objects.filter(team__in=teams).values("graph"),
        sources=TeamSource.objects.filter(team__in=teams).values("source_name"),
        claimed_graphs=TeamGraph.objects.values("graph"),
        claimed_sources=TeamSource.objects.values("source_name"),
    )
    if unclaimed is None:
        unclaimed = Exists(teams.filter(owns_unclaimed=True))
    return owners.q(run, unclaimed)


# --- scoping -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """What one user (narrowed to one of their teams, or not) sees; making it runs no query."""

    everything: bool
    teams: QuerySet[Team]
    team: str = ""  # the slug a `?team=` switch chose, "" for all of the user's teams
    unclaimed: object = None  # a condition: whether the runs no team claims are in scope (a bool once resolved)
    owners: Owners | None = None  # the owned and claimed names read once (`resolved`), else subqueries
    # How `scope_for` made it, (shape, values): `resolved` reads it with SQL compiled once per shape.
    made: tuple = ()

    def q(self, run: str = "") -> Q:
        """The filter for rows whose run is in scope (`run` is the path to the run)."""
        if self.everything:
            return Q()
        if self.owners is None:
            return owns_q(self.teams, run, unclaimed=self.unclaimed)
        return self.owners.q(run, self.unclaimed)

    def resolved(self) -> Scope:
        """The same scope with the graph and source names its filter compares with read now, in one query,
        so that a page of many counts sends (and the database plans) lists of a few names rather than the
        same subqueries in every count. Read per request: a graph that changes hands is seen at the next one.
        """
        if self.everything or self.owners is not None:
            return self
        if self.made:
            shape, values = self.made
            reading = compiled.kept(("scope", shape), lambda: resolution(*_made_of(shape)))
        else:
            reading, values = resolution(self.teams, self.unclaimed), ()
        claimed: dict[tuple[str, bool], list[str]] = {(k, m): [] for k in ("graph", "source") for m in (True, False)}
        unclaimed = False
        for kind, name, owned in reading.rows(**dict(values)):
            if kind == UNCLAIMED:
                unclaimed = name == "y"
            else:
                claimed[kind, bool(owned)].append(name)
        owners = Owners(
            graphs=claimed["graph", True],
            sources=claimed["source", True],
            claimed_graphs=claimed["graph", True] + claimed["graph", False],
            claimed_sources=claimed["source", True] + claimed["source", False],
        )
        return Scope(everything=False, teams=self.teams, team=self.team, unclaimed=unclaimed, owners=owners)

    def apply(self, queryset: QuerySet, run: str = "") -> QuerySet:
        return queryset if self.everything else queryset.filter(self.q(run))

    @property
    def key(self) -> tuple | None:
        """Everything the filter's SQL is made of, as a value (a query compiled once per scope is kept by it:
        `receipts.queries.compiled.once`); None while it holds a condition to compile (not `resolved`). The names
        are read per request (`resolved`): a graph that changes hands changes the key at the next one."""
        if self.everything:
            return ("everything",)
        if self.owners is None or not isinstance(self.unclaimed, bool):
            return None
        owners = self.owners
        names = (owners.graphs, owners.sources, owners.claimed_graphs, owners.claimed_sources)
        return (self.unclaimed, *map(tuple, names))


def _made_of(shape: str) -> tuple[QuerySet[Team], object]:
    """The teams and the unclaimed condition of a scope `scope_for` makes, its values slots (`Scope.made`)."""
    user = slot("user")
    if shape == "member":
        return _teams_of_id(user), _sees_unclaimed_id(user)
    pool = Team.objects.all() if shape == "any team" else _teams_of_id(user)
    return pool.filter(slug=slot("team")), None


# For callers that are not a user's request (metrics, workers, the admin): every run.
EVERYTHING = Scope(everything=True, teams=Team.objects.all())


# Inside `resolved_scopes()`: the scopes resolved so far, by (user, team).
_resolved: contextvars.ContextVar[dict | None] = contextvars.ContextVar("teams_resolved", default=None)


@contextlib.contextmanager
def resolved_scopes() -> Iterator[None]:
    """Inside the block, `scope_for` gives each user's scope `resolved()` once (one query per user and team) and
    the same scope again after: for work that applies one scope a dozen times (a live page's render, whose
    overview compiled the subqueries into every one of its queries: two thirds of its CPU)."""
    token = _resolved.set({})
    try:
        yield
    finally:
        _resolved.reset(token)


def scope_for(user, team: str = "") -> Scope:
    """The scope of `user`, narrowed to the team `team` names when given (raises UnknownTeam if not theirs).

    An admin may narrow to any team; anybody else only to one of their own.
    """
    resolved = _resolved.get()
    if resolved is None:
        return _scope_for(user, team)
    key = (getattr(user, "pk", None), team)
    if key not in resolved:
        resolved[key] = _scope_for(user, team).resolved()
    return resolved[key]


def _scope_for(user, team: str) -> Scope:
    if user is None or not user.is_authenticated:
        return Scope(everything=False, teams=Team.objects.none(), unclaimed=Q(pk__in=[]))
    if not team:
        if sees_all(user):
            return EVERYTHING
        made = ("member", (("user", user.pk),))
        return Scope(everything=False, teams=teams_of(user), unclaimed=_sees_unclaimed(user), made=made)
    admin = sees_all(user)
    pool = Team.objects.all() if admin else teams_of(user)
    chosen = pool.filter(slug=team)
    if not chosen.exists():
        msg = "that team is not one of yours (choose one of the teams listed)"
        raise UnknownTeam(msg)
    made = ("any team" if admin else "my team", (("user", user.pk), ("team", team)))
    return Scope(everything=False, teams=chosen, team=team, made=made)


def _sees_unclaimed(user):
    return _sees_unclaimed_id(user.pk)


def _sees_unclaimed_id(user_id):
    # The default team's members, and users in no team (also when the default team was deleted).
    memberships = Membership.objects.filter(user_id=user_id)
    return Exists(memberships.filter(team__owns_unclaimed=True)) | ~Exists(memberships)


def scope(queryset: QuerySet, user, *, run: str = "", team: str = "") -> QuerySet:
    """`queryset` narrowed to the rows whose run `user` may see (`run` is the path from a row to its run)."""
    return scope_for(user, team).apply(queryset, run)


def visible_runs(user, team: str = "") -> QuerySet:
    """The runs `user` sees (narrowed to one of their teams by `team`)."""
    return scope(Run.objects.all(), user, team=team)


def switchable(user) -> list[tuple[str, str]]:
    """(slug, name) of the teams a `?team=` may choose for `user`: every team for an admin, else theirs.

    Kept in the cache, so a page that offers the switcher runs no query for it: the entry is per user (and
    per admin status), and every change to a team or a membership starts a new generation of entries
    (`forget_switchable`). The runs shown never come from the cache: the scope is asked of the database.
    """
    everything = sees_all(user)
    joined = getattr(user, "date_joined", None)
    key = f"teams:switch:{user.pk}:{joined.timestamp() if joined else ''}:{everything}"
    try:
        found = cache.get_many([_GENERATION, key])
    except Exception:  # noqa: BLE001 - Redis down: ask the database
        found = {}
    generation = found.get(_GENERATION, 0)
    if key in found and found[key][0] == generation:
        return found[key][1]
    pool = Team.objects.all() if everything else teams_of(user)
    choices = [tuple(row) for row in pool.order_by("slug").values_list("slug", "name")]
    with contextlib.suppress(Exception):
        cache.set(key, (generation, choices), SWITCH_SECONDS)
    return choices


def warm_switchable(user=None, **kwargs) -> None:
    """At login: put the user's switcher in the cache (a receiver of `user_logged_in`)."""
    if user is not None and user.is_authenticated:
        switchable(user)


def forget_switchable(**kwargs) -> None:
    """A team or a membership changed: every cached switcher is of an older generation from now on."""
    with contextlib.suppress(Exception):
        cache.set(_GENERATION, time.time_ns(), None)


def audience_key(user) -> tuple:
    """What makes the runs `user` sees differ from another user's: "all", or their team ids (a user in no
    team: none, and the runs no team claims)."""
    if sees_all(user):
        return ("all",)
    return ("teams", tuple(Membership.objects.filter(user=user).order_by("team_id").values_list("team_id", flat=True)))


def limited(audience: tuple) -> bool:
    """Whether a live audience (ending with `audience_key`) sees only some teams' runs."""
    return bool(audience) and isinstance(audience[-1], tuple) and audience[-1][:1] == ("teams",)


def hidden_from_audience(audience: tuple, run_ids: list[int]) -> set[int]:
    """Which of `run_ids` are runs the audience whose key is `audience[-1]` does not see (one query, compiled once
    per number of teams and of runs, the latter rounded up to a power of two: the ids are slots, the last repeated)."""
    if not run_ids:
        return set()
    team_ids = audience[-1][1]
    size = 1 << (len(run_ids) - 1).bit_length()

    def build() -> QuerySet:
        if team_ids:
            owned = owns_q(Team.objects.filter(pk__in=[slot(f"team{n}") for n in range(len(team_ids))]))
        else:  # a user in no team: the runs no team claims
            owned = owns_q(Team.objects.none(), unclaimed=Q(pk__isnull=False))
        runs = Run.objects.filter(pk__in=[slot(f"run{n}") for n in range(size)])
        return runs.exclude(owned).values_list("pk")

    values = {f"team{n}": pk for n, pk in enumerate(team_ids)}
    values.update((f"run{n}", run_ids[min(n, len(run_ids) - 1)]) for n in range(size))
    hidden = compiled.once(("hidden runs", len(team_ids), size), build, values=True).rows(**values)
    return {pk for (pk,) in hidden}


def sees_run(user, run: Run) -> bool:
    """Whether `run` is one of the runs `user` sees."""
    return sees_all(user) or visible_runs(user).filter(pk=run.pk).exists()


def who_see(run: Run, users: QuerySet) -> QuerySet:
    """Those of `users` who see `run`: the members of its team and those who see every team (one query less
    than asking each)."""
    owner = owner_of(run)
    admins = holding_q(users.model, Permission.objects.filter(codename=_ADMIN_CODENAME))
    if owner is not None:
        members = members_of(Team.objects.filter(pk=owner.pk), users)
    else:  # a run no team claims, and no default team: users in no team see it
        members = users.filter(~Exists(Membership.objects.filter(user=OuterRef("pk"))))
    return users.filter(admins | Q(pk__in=members.values("pk")))


def holding_q(user_model, permissions: QuerySet) -> Q:
    """The users holding one of `permissions` (superusers, directly or through a group), as EXISTS tests.

    Not as joins: a filter over user_permissions and groups' permissions joins both into every user's row, and
    two such filters (the deciders, then who_see's admins) multiply them; PostgreSQL's estimate of that product
    crossed its JIT thresholds, so each reassign form paid about a second compiling a query over a few rows."""
    direct = user_model.user_permissions.through.objects.filter(user=OuterRef("pk"), permission__in=permissions)
    grouped = user_model.groups.through.objects.filter(user=OuterRef("pk"), group__permissions__in=permissions)
    return Q(is_superuser=True) | Exists(direct) | Exists(grouped)


def graphs_usable(user, graphs: Iterable[str]) -> list[str]:
    """Those of `graphs` whose runs `user` may start (and would see): their teams' graphs, and the graphs no
    team claims for the default team's members and users in no team."""
    graphs = list(graphs)
    if not graphs or sees_all(user):
        return graphs
    claimed = dict(TeamGraph.objects.filter(graph__in=graphs).values_list("graph", "team_id"))
    mine = dict(teams_of(user).values_list("pk", "owns_unclaimed"))
    unclaimed = any(mine.values()) or not Membership.objects.filter(user=user).exists()
    return [name for name in graphs if (claimed[name] in mine if name in claimed else unclaimed)]


def same_owner(run: Run, source_name: str) -> bool:
    """Whether `run` and the runs of the source `source_name` belong to the same team."""
    return owner_of(run) == owner_of(Run(source_name=source_name))


def owner_of(run: Run) -> Team | None:
    """The team that owns `run` (the default team for a run no team claims), None when nobody does."""
    if run.source_name:
        found = TeamSource.objects.filter(source_name=run.source_name).select_related("team").first()
    else:
        found = TeamGraph.objects.filter(graph=run.graph).select_related("team").first()
    return found.team if found is not None else default_team()
