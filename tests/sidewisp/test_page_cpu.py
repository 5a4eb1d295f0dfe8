"""Pages spend little CPU a request (issue 32 §4): a list's row renders no template per badge or time, and the runs
list's filter fields are rendered once per distinct filters (each request still shows its own values and errors), and
a short window's handoff counts are SQL written once per process."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from receipts.models import Handoff, Run, TeamGraph
from receipts.org import teams
from receipts.queries import compiled, dashboard, history
from receipts.queries.dashboard import windows
from sidewisp.pages.overview import overview_context
from tests.sidewisp.test_pages import bulk_handoffs

pytestmark = pytest.mark.django_db

RUNS = reverse("sidewisp:runs")


def _rendered(client, params: dict) -> tuple[list[str], str]:
    """The templates the second of two identical requests rendered, and its body."""
    client.get(RUNS, params)
    response = client.get(RUNS, params)
    return [t.name for t in response.templates], response.content.decode()


def test_a_runs_list_row_renders_at_most_two_templates(viewer_client):
    bulk_handoffs(300)  # 30 runs: a full page of 25, and 11 of them match "p-2"
    full, full_body = _rendered(viewer_client, {})
    few, few_body = _rendered(viewer_client, {"q": "p-2"})
    rows = full_body.count('id="run-row-'), few_body.count('id="run-row-')
    assert rows == (25, 11)
    # The row and its dry-run mark; its health, verdict and time badges are built by simple tags.
    assert (len(full) - len(few)) / (rows[0] - rows[1]) <= 2


def test_the_runs_filters_render_once_and_show_each_requests_own_values_and_errors(viewer_client):
    bulk_handoffs(10)
    templates, body = _rendered(viewer_client, {"agent": "alice"})
    assert not [name for name in templates if name.startswith("django/forms/")]
    assert 'value="alice"' in body
    other = viewer_client.get(RUNS, {"agent": "bob"}).content.decode()
    assert 'value="bob"' in other and 'value="alice"' not in other
    assert "Enter a valid date/time" in viewer_client.get(RUNS, {"since": "yesterday"}).content.decode()
    assert "Enter a valid date/time" not in viewer_client.get(RUNS, {"since": "2026-01-02T03:04"}).content.decode()


def test_a_short_windows_counts_are_written_once_and_put_each_problem_in_its_bucket():
    now = timezone.now()
    since = now - timedelta(hours=1)
    edges = windows._bucket_edges(since, now)
    # A problem on a bucket's edge (in that bucket), one just before the next edge, one after `now` (the last
    # bucket is open-ended), one healthy (counted, no problem) and one older than the window (not counted).
    made = [(edges[3], "FALSE_COMPLETE"), (edges[5] - timedelta(seconds=1), "ROUTE_REJECTED")]
    made += [
        (now + timedelta(minutes=1), "UNCERTAIN"),
        (edges[7], "HEALTHY"),
        (since - timedelta(minutes=1), "UNCERTAIN"),
    ]
    for n, (at, verdict) in enumerate(made):
        run = Run.objects.create(operation_id=f"op-{n}", thread_id=f"th-{n}")
        Handoff.objects.create(handoff_id=f"h-{n}", run=run, verdict=verdict, created_at=at)
    compiled.forget()
    windows._counts_sql.cache_clear()
    stats = windows.window_stats(since, now)
    windows.window_stats(since - timedelta(minutes=5), now)
    assert (stats.handoffs, stats.problem_handoffs) == (4, 3)
    assert stats.problem_trend == [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1]
    assert windows._counts_sql.cache_info().misses == 1


def test_the_run_historys_source_queries_are_compiled_once_and_read_each_runs_own_entries(record_handoff):
    runs = [record_handoff(f"h-{n}", f"op-{n}", "healthy").run for n in (1, 2)]
    history._source_query.cache_clear()
    for run in runs:
        whole = [e.anchor for e in history.page(run, size=100).entries]
        paged, page = [], history.page(run, size=3)
        while True:  # the next pages by cursor: each run's own entries, every one once, in order
            assert {entry.handoff.run_id for entry in page.entries} == {run.pk}
            paged += [e.anchor for e in page.entries]
            if page.older is None:
                break
            page = history.page(run, size=3, older=page.older)
        assert paged == whole and len(whole) > 6
        if run == runs[0]:
            compiled = history._source_query.cache_info().misses
    assert history._source_query.cache_info().misses == compiled  # the second run's pages compiled nothing


def test_a_scope_read_while_no_team_claims_a_name_filters_nothing_and_one_that_sees_none_compiles(person, make_team):
    # The default team's member, while no team claims a graph or source: every run, and no subquery to compile
    # into each of the overview's queries (`Scope.resolved` answers whether unclaimed runs are seen).
    bulk_handoffs(20)
    resolved = teams.scope_for(person("ann", "viewer")).resolved()
    assert resolved.q("run__") == Q()
    assert resolved.apply(Handoff.objects.all(), "run__").count() == 20
    # A member of a team that owns nothing sees no run, by a filter that still compiles into SQL written around it.
    lonely = person("bo", "viewer")
    teams.add_member(lonely, make_team("empty"))
    nothing = teams.scope_for(lonely).resolved()
    assert dashboard.window_stats(timezone.now() - timedelta(hours=1), timezone.now(), seen=nothing).handoffs == 0
    assert dashboard.newest_handoffs(seen=nothing) == [] and dashboard.open_wait_count(seen=nothing) == 0


def test_the_overviews_queries_are_compiled_once_per_scope_and_a_graph_that_changes_hands_shows_at_once(
    person, make_team
):
    bulk_handoffs(40)
    Run.objects.filter(pk__in=Run.objects.order_by("pk").values("pk")[:2]).update(graph="billing")
    member, other = person("ann", "viewer"), make_team("other")
    teams.add_member(member, make_team("billing-team", graphs=["billing"]))
    compiled.forget()
    first = overview_context(member, "1h")
    kept = len(compiled._kept)
    assert kept >= 9 and ("scope", "member") in compiled._kept  # every query of the overview, the scope's too
    again = overview_context(member, "1h")
    assert len(compiled._kept) == kept  # the second request compiled nothing
    shown = lambda context: [h.pk for h in context["newest"]]  # noqa: E731
    assert shown(again) == shown(first) and first["stats"].handoffs == 20  # two runs of ten
    TeamGraph.objects.filter(graph="billing").update(team=other)  # the graph changes hands
    after = overview_context(member, "1h")
    assert after["stats"].handoffs == 0 and shown(after) == []


def test_the_dry_mark_of_a_handoff_row_is_what_its_template_shows():
    from django.template.loader import render_to_string

    from sidewisp.templatetags.sidewisp_tags import dry_mark

    for dry in (True, False):
        run = Run(operation_id="op", thread_id="t", dry_run=dry)
        assert dry_mark(run) == render_to_string("sidewisp/_dry.html", {"run": run})


def test_the_decisions_on_open_waits_are_read_with_sql_compiled_once_per_size(person):
    from receipts.models import Decision
    from sidewisp.pages.decisions import decisions_on_open_waits

    run = Run.objects.create(operation_id="op", thread_id="t")
    waits = [
        Handoff.objects.create(
            handoff_id=f"h-{n}", run=run, wait_open=True, wait_part={"resume_token_id": f"tok-{n}"}, verdict="HEALTHY"
        )
        for n in range(3)  # three: padded to four slots
    ]
    boss = person("boss", "approver")
    Decision.objects.create(run=run, handoff=waits[0], resume_token_id="tok-0", kind="approve", decided_by=boss)
    Decision.objects.create(run=run, handoff=waits[2], resume_token_id="an-older-token", kind="reject")
    compiled.forget()
    found = decisions_on_open_waits(waits)
    assert set(found) == {waits[0].pk} and found[waits[0].pk].by == "boss"
    kept = len(compiled._kept)
    assert set(decisions_on_open_waits(waits[::-1])) == {waits[0].pk} and len(compiled._kept) == kept


def test_the_overviews_open_totals_are_the_two_counts_in_one_query(person, make_team, django_assert_num_queries):
    for run in bulk_handoffs(40):
        run.open_false_count = run.pk % 3
        run.save(update_fields=["open_false_count"])
    Run.objects.filter(pk=Run.objects.order_by("pk").values("pk")[:1]).update(graph="billing")
    member = person("ann", "viewer")
    teams.add_member(member, make_team("billing-team", graphs=["billing"]))
    teamless = teams.scope_for(person("bo", "viewer")).resolved()
    for seen in (teams.EVERYTHING, teams.scope_for(member).resolved(), teamless):
        separately = (dashboard.open_wait_count(seen=seen), dashboard.false_completion_count(seen=seen))
        with django_assert_num_queries(1):
            assert dashboard.open_totals(seen=seen) == separately
