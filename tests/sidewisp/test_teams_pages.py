"""The pages per team (issue 22 §2): lists, counts, search, the audit page and CSV show one's teams' runs only;
the team switcher; query counts that do not grow with the rows."""

from __future__ import annotations

import csv
import io

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts.models import AuditEntry, Handoff, Run
from receipts.org import audit, teams
from tests.sidewisp.test_pages import bulk_handoffs


@pytest.fixture
def alpha(make_team):
    return make_team("alpha", graphs=["alpha-graph"])


@pytest.fixture
def beta(make_team):
    return make_team("beta", graphs=["beta-graph"])


def _split(n: int) -> tuple[set[str], set[str]]:
    """n handoffs over n / 10 runs, the even runs alpha's and the odd ones beta's; their operation ids."""
    runs = bulk_handoffs(n)
    for i, run in enumerate(runs):
        run.graph = "alpha-graph" if i % 2 == 0 else "beta-graph"
    Run.objects.bulk_update(runs, ["graph"])
    return {r.operation_id for r in runs[::2]}, {r.operation_id for r in runs[1::2]}


@pytest.fixture
def ann(person, alpha):
    user = person("ann", "operator")
    teams.add_member(user, alpha)
    return user


def _login(client, user):
    client.force_login(user)
    return client


def test_the_runs_list_shows_only_the_users_teams_runs(client, ann, beta):
    mine, _theirs = _split(40)

    page = _login(client, ann).get(reverse("sidewisp:runs"))

    listed = {run.operation_id for run in page.context["page_obj"]}
    assert listed == mine
    assert page.context["page_obj"].count == len(mine)


def test_a_search_never_finds_another_teams_run(client, ann, beta):
    mine, theirs = _split(40)
    other = sorted(theirs)[0]
    _login(client, ann)

    exact = client.get(reverse("sidewisp:runs"), {"q": other})  # an exact id opens its run, when one sees it
    assert exact.status_code == 200 and list(exact.context["page_obj"]) == []
    other_run = Run.objects.get(operation_id=other)
    assert reverse("sidewisp:run-detail", args=[other_run.pk]) not in exact.content.decode()
    partial = client.get(reverse("sidewisp:runs"), {"q": "op-"})
    assert {run.operation_id for run in partial.context["page_obj"]} <= mine
    handoff = Handoff.objects.filter(run__operation_id=other).first()
    by_handoff = client.get(reverse("sidewisp:runs"), {"q": handoff.handoff_id}).context["page_obj"]
    assert not {run.operation_id for run in by_handoff} & theirs
    graphs = client.get(reverse("sidewisp:runs")).context["form"].fields["graph"].choices
    assert "beta-graph" not in {value for value, _ in graphs}


def test_the_waits_and_the_false_completions_hold_only_the_users_teams_handoffs(client, ann, beta):
    mine, _ = _split(40)
    _login(client, ann)

    waits = client.get(reverse("sidewisp:waits")).context["waits"]
    false = client.get(reverse("sidewisp:false-completions")).context["false_completions"]

    assert waits and {h.run.operation_id for h in waits} <= mine
    assert false and {h.run.operation_id for h in false} <= mine


def test_the_overview_counts_only_the_users_teams_runs(client, ann, beta):
    mine, _ = _split(40)

    context = _login(client, ann).get(reverse("sidewisp:overview")).context

    own = Handoff.objects.filter(run__operation_id__in=mine)
    assert context["open_wait_count"] == own.filter(wait_open=True).count()
    assert {h.run.operation_id for h in context["newest"]} <= mine
    assert sum(n for _, n in context["status_counts"]) == len(mine)


def _audit_rows(client) -> list[list[str]]:
    response = client.get(reverse("sidewisp:audit-csv"))
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))[1:]


def test_the_audit_page_and_csv_never_show_another_teams_rows(client, ann, beta):
    mine, _theirs = _split(20)
    for run in Run.objects.all():
        audit.log(actor=None, action="run.stop", object_type="run", object_id=run.pk, outcome="done", run=run)
    audit.log(actor=None, action="limits.change", object_type="limits", object_id="v2", outcome="done")
    _login(client, ann)

    rows = _audit_rows(client)
    page = client.get(reverse("sidewisp:audit")).context["page_obj"]

    assert {row[5] for row in rows if row[5]} == mine
    assert [row[2] for row in rows if not row[5]] == ["limits.change"]  # about no run: no team's evidence
    assert {e.run.operation_id for e in page if e.run} == mine


def test_an_admin_reads_every_teams_audit_rows(client, person, alpha, beta):
    mine, theirs = _split(20)
    for run in Run.objects.all():
        audit.log(actor=None, action="run.stop", object_type="run", object_id=run.pk, outcome="done", run=run)

    rows = _audit_rows(_login(client, person("boss", "admin")))

    assert {row[5] for row in rows} == mine | theirs


# --- the team switcher --------------------------------------------------------------------------------

SWITCHED = ["sidewisp:overview", "sidewisp:waits", "sidewisp:map"]


@pytest.mark.parametrize("name", SWITCHED)
def test_a_user_in_one_team_sees_no_switcher(client, ann, beta, name):
    body = _login(client, ann).get(reverse(name)).content.decode()
    assert "team-switch" not in body


@pytest.mark.parametrize("name", SWITCHED)
def test_a_user_in_two_teams_switches_between_them(client, ann, beta, name):
    _mine, theirs = _split(40)
    teams.add_member(ann, beta)
    _login(client, ann)

    body = client.get(reverse(name)).content.decode()
    assert 'class="tabs team-switch"' in body and 'data-team="alpha"' in body and 'data-team="beta"' in body
    narrowed = client.get(reverse(name), {"team": "beta"})
    assert narrowed.status_code == 200
    assert 'data-team="beta" aria-current="page"' in narrowed.content.decode() or (
        'aria-current="page" data-team="beta"' in narrowed.content.decode()
    )
    if name == "sidewisp:waits":
        assert {h.run.operation_id for h in narrowed.context["waits"]} <= theirs


@pytest.mark.parametrize("name", [*SWITCHED, "sidewisp:runs"])
def test_a_team_that_is_not_the_users_is_refused_in_words(client, ann, beta, name):
    response = _login(client, ann).get(reverse(name), {"team": "beta"})

    assert response.status_code == 400
    assert "team: that team is not one of yours" in response.content.decode()
    assert client.get(reverse(name), {"team": "no-such-team"}).status_code == 400


def test_the_runs_list_narrows_to_one_of_the_users_teams(client, ann, beta):
    _mine, theirs = _split(40)
    teams.add_member(ann, beta)

    page = _login(client, ann).get(reverse("sidewisp:runs"), {"team": "beta"})

    assert {run.operation_id for run in page.context["page_obj"]} == theirs


def test_an_admin_sees_the_switcher_of_every_team(client, person, alpha, beta):
    body = _login(client, person("boss", "admin")).get(reverse("sidewisp:overview")).content.decode()
    assert 'data-team="alpha"' in body and 'data-team="beta"' in body and 'data-team="default"' in body


# --- query counts ---------------------------------------------------------------------------------------

PAGES = [
    "sidewisp:overview",
    "sidewisp:runs",
    "sidewisp:waits",
    "sidewisp:false-completions",
    "sidewisp:map",
    "sidewisp:audit",
]


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
        if response.streaming:
            b"".join(response.streaming_content)
    assert response.status_code == 200, url
    return len(queries)


@pytest.mark.parametrize("name", [*PAGES, "sidewisp:audit-csv"])
def test_a_team_members_pages_run_as_many_queries_for_many_rows_as_for_few(client, ann, beta, name):
    _login(client, ann)
    teams.add_member(ann, beta)  # two teams: the switcher is shown, and costs no query
    _split(20)
    for run in Run.objects.all():  # rows on every page, the audit's too
        audit.log(actor=None, action="run.stop", object_type="run", object_id=run.pk, outcome="done", run=run)
    _queries(client, reverse(name))  # the switcher's cache entry is renewed by the membership change
    few = _queries(client, reverse(name))
    _split_more(2_000)
    assert _queries(client, reverse(name)) == few


def _split_more(n: int) -> None:
    start = Run.objects.count()
    runs = Run.objects.bulk_create(
        Run(operation_id=f"op-more-{i}", thread_id=f"t-more-{i}", graph=("alpha-graph", "beta-graph")[i % 2])
        for i in range(start, start + n // 10)
    )
    template = Handoff.objects.order_by("pk").first()
    Handoff.objects.bulk_create(
        Handoff(
            handoff_id=f"h-more-{i}",
            run=runs[i % len(runs)],
            sender=template.sender,
            receiver=template.receiver,
            verdict=template.verdict,
            boundaries=template.boundaries,
        )
        for i in range(n)
    )
    AuditEntry.objects.bulk_create(
        AuditEntry(
            actor_name="oncall", action="run.stop", object_type="run", object_id=str(r.pk), outcome="done", run=r
        )
        for r in runs
    )
