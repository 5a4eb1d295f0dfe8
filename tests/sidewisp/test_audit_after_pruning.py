"""Issue 29 §1: an audit entry stays its team's after retention prunes its run (the page and the CSV)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from receipts.models import AuditEntry, Handoff, RetentionPolicy, Run, TeamGraph
from receipts.org import audit, teams
from receipts.retention import pruner

pytestmark = pytest.mark.django_db
NOW = timezone.now()


@pytest.fixture
def alpha(make_team):
    return make_team("alpha", graphs=["alpha-graph"], sources=["alpha-remote"])


@pytest.fixture
def beta(make_team):
    return make_team("beta", graphs=["beta-graph"], sources=["beta-remote"])


def _member(person, name: str, team):
    user = person(name, "operator")
    teams.add_member(user, team)
    return user


def _ended_run(name: str, *, graph: str = "", source_name: str = "") -> Run:
    ended = NOW - timedelta(days=90)
    run = Run.objects.create(
        operation_id=f"op-{name}",
        thread_id=f"th-{name}",
        graph=graph,
        source_name=source_name,
        status=Run.Status.COMPLETE,
        finished_at=ended,
        created_at=ended,
    )
    handoff = Handoff.objects.create(handoff_id=f"h-{name}", run=run, verdict="FALSE_COMPLETION", created_at=ended)
    audit.log(
        actor=None,
        action="run.stop",
        object_type="run",
        object_id=run.operation_id,
        outcome="done",
        reason=f"reason-of-{name}",
        run=run,
    )
    audit.log(
        actor=None,
        action="wait.cancel",
        object_type="handoff",
        object_id=handoff.handoff_id,
        outcome="done",
        reason=f"handoff-of-{name}",
        handoff=handoff,
    )
    return run


def test_an_entry_naming_only_a_handoff_keeps_its_pruned_runs_owner():
    """log() names the handoff's run too; an entry naming only the handoff is found through it all the same."""
    run = _ended_run("b-local", graph="beta-graph", source_name="beta-remote")
    entry = AuditEntry.objects.create(
        actor_name="system",
        action="wait.cancel",
        object_type="handoff",
        object_id=run.handoffs.get().handoff_id,
        handoff=run.handoffs.get(),
        outcome="done",
    )
    _prune()
    entry.refresh_from_db()
    kept = (entry.run_id, entry.handoff_id, entry.run_pruned, entry.pruned_run_graph, entry.pruned_run_source_name)
    assert kept == (None, None, True, "beta-graph", "beta-remote")


def _seen(client, user) -> tuple[set[str], set[str]]:
    """The reasons and object ids `user` reads on the audit page and in audit.csv (all of them: one page)."""
    client.force_login(user)
    page = client.get(reverse("sidewisp:audit"))
    assert page.status_code == 200
    on_page = {e.object_id for e in page.context["page_obj"]} | {e.reason for e in page.context["page_obj"]}
    body = b"".join(client.get(reverse("sidewisp:audit-csv")).streaming_content).decode()
    rows = list(csv.reader(io.StringIO(body)))[1:]
    in_csv = {row[4] for row in rows} | {row[8] for row in rows}
    return on_page - {""}, in_csv - {""}


def _prune() -> pruner.LastRun:
    policy = RetentionPolicy(pk=1, receipts_days=30, reports_days=30, deliveries_days=30, runs_days=60)
    policy.audit_days, policy.audit_minimum_days = 400, 365
    return pruner.prune(now=NOW, policy=policy, pause=0)


def test_another_teams_audit_entries_stay_hidden_after_their_runs_are_pruned(client, person, alpha, beta):
    ann, bob = _member(person, "ann", alpha), _member(person, "bob", beta)
    runs = {
        "a-local": _ended_run("a-local", graph="alpha-graph"),
        "a-remote": _ended_run("a-remote", source_name="alpha-remote"),
        "b-local": _ended_run("b-local", graph="beta-graph"),
        "b-remote": _ended_run("b-remote", graph="alpha-graph", source_name="beta-remote"),  # the source decides
    }
    audit.log(actor=None, action="limits.change", object_type="limits", object_id="v2", outcome="done")

    def ids(*names: str) -> set[str]:
        return {f"{kind}-{n}" for n in names for kind in ("op", "h", "reason-of", "handoff-of")}

    alphas, betas = ids("a-local", "a-remote"), ids("b-local", "b-remote")
    for when in ("before", "after"):
        for user, own, other in ((ann, alphas, betas), (bob, betas, alphas)):
            on_page, in_csv = _seen(client, user)
            for seen in (on_page, in_csv):
                assert own <= seen, when
                assert not seen & other, when
                assert "v2" in seen, when  # about no run: every audit reader's
        if when == "before":
            last = _prune()
            assert not Run.objects.filter(pk__in=[r.pk for r in runs.values()]).exists()
            assert last.removed["audit_entries_detached"] == 4 * 2  # each run's two entries


def test_an_admin_still_reads_every_pruned_runs_entries(client, person, alpha, beta):
    _ended_run("b-local", graph="beta-graph")
    _prune()
    on_page, in_csv = _seen(client, person("boss", "admin"))
    assert {"op-b-local", "h-b-local"} <= on_page and {"op-b-local", "h-b-local"} <= in_csv


def test_a_pruned_run_that_changes_hands_moves_its_entries_with_it(client, person, alpha, beta):
    """The entry keeps the run's graph, not a team: a graph given to another team takes its history along,
    as the runs of that graph would go."""
    ann = _member(person, "ann", alpha)
    _ended_run("b-local", graph="beta-graph")
    _prune()
    assert "op-b-local" not in _seen(client, ann)[0]
    TeamGraph.objects.filter(graph="beta-graph").update(team=alpha)
    assert "op-b-local" in _seen(client, ann)[0]
