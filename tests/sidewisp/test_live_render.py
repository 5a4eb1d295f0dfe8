"""The live pages' speed without their promises bending: bursts, queries per render, rows and cards rendered once."""

from __future__ import annotations

import asyncio
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from channels.db import database_sync_to_async
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from receipts.models import Handoff, Run
from sidewisp import pages
from sidewisp.live import hub as live
from sidewisp.live import render as liverender
from sidewisp.live import threads
from tests.sidewisp import test_live_hub
from tests.sidewisp.test_consumer import TIMEOUT, _event, receive_until, run_async, session_cookie
from tests.sidewisp.test_live_hub import SCOPE, Page, open_sockets

RUNS = pages.PageScope("runs")
WAITS = pages.PageScope("waits")
renders, stand_in = test_live_hub.renders, test_live_hub.stand_in  # the hub tests' fixtures


def test_a_change_that_finds_the_page_idle_is_rendered_with_the_rest_of_its_burst(stand_in, monkeypatch):
    # A settle far longer than a loaded machine can stall between two loop ticks: the test cannot race it.
    monkeypatch.setattr(live, "SETTLE_SECONDS", 0.5)

    async def body():
        hub, page = live.Hub(), Page()
        topic = hub.subscribe(page, SCOPE, ("viewer",))
        assert (await page.next())["kind"] == "snapshot"
        hub.dispatch({"type": "health.event", "event": _event(run=7, seq=1)})
        for _ in range(3):
            await asyncio.sleep(0)  # the topic's render loop has started and is settling
        hub.dispatch({"type": "health.event", "event": _event(run=7, seq=2)})
        assert await page.next() == {"kind": "events", "seqs": [[7, [1, 2]]]}
        assert stand_in.count == 2  # the snapshot and one render for both
        await hub.unsubscribe(page, topic)

    run_async(body)


def test_a_change_noted_while_its_render_waits_for_a_thread_is_named_by_that_render(stand_in):
    # Every render thread busy: the render of change 1 is asked for but waits; change 2 comes meanwhile.
    release, busy = threading.Event(), []

    def occupy() -> None:
        busy.append(threading.current_thread())
        release.wait(TIMEOUT)

    async def until(condition) -> None:
        deadline = asyncio.get_running_loop().time() + TIMEOUT
        while not condition():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)

    async def body():
        hub, page = live.Hub(), Page()
        topic = hub.subscribe(page, SCOPE, ("viewer",))
        assert (await page.next())["kind"] == "snapshot"
        for _ in range(threads.RENDER_THREADS):
            threads.render_threads.submit(occupy)
        await until(lambda: len(busy) == threads.RENDER_THREADS)
        hub.dispatch({"type": "health.event", "event": _event(run=7, seq=1)})
        await until(lambda: not threads.render_threads.jobs.empty())  # its render is asked for, and waits
        hub.dispatch({"type": "health.event", "event": _event(run=7, seq=2)})
        release.set()
        assert await page.next() == {"kind": "events", "seqs": [[7, [1, 2]]]}
        assert stand_in.count == 2 and not topic.dirty  # the snapshot and one render: none owed for change 2
        await hub.unsubscribe(page, topic)

    run_async(body)


def test_the_last_change_of_a_burst_is_always_rendered_and_every_change_is_named(stand_in):
    async def body():
        hub, page = live.Hub(), Page()
        topic = hub.subscribe(page, SCOPE, ("viewer",))
        assert (await page.next())["kind"] == "snapshot"
        for seq in range(1, 61):
            hub.dispatch({"type": "health.event", "event": _event(run=7, seq=seq)})
            if seq % 7 == 0:
                await asyncio.sleep(live.COALESCE_SECONDS / 3)  # some land during renders, some between
        named: list[int] = []
        while 60 not in named:
            marker = await page.next()
            named += [seq for _, seqs in marker["seqs"] for seq in seqs]
        assert sorted(named) == list(range(1, 61))  # each once, none lost
        assert stand_in.count < 60  # coalesced: fewer renders than changes
        await hub.unsubscribe(page, topic)

    run_async(body)


@pytest.mark.django_db
# Not yet the run page: it reads each open wait's decisions on its own (pages._offer_on_handoff).
@pytest.mark.parametrize("page", ["overview", "runs", "waits", "false"])
def test_a_render_reads_as_many_queries_with_many_rows_as_with_few(page, viewer, record_handoff):
    def add(numbers: range) -> None:
        for n in numbers:  # waits and false completions, on one run (the run page) or a run each
            record_handoff(f"h-{n}", "op-1" if page == "run" else f"op-{n}", "waiting" if n % 2 else "false_complete")

    add(range(1, 3))
    few = _queries(page, viewer)
    add(range(3, 15))
    assert _queries(page, viewer) == few


@pytest.mark.django_db
def test_a_topic_asks_who_its_subscribers_are_once_a_second_not_once_a_render(viewer, record_handoff):
    record_handoff("h-1", "op-1", "healthy")
    audience = pages.audience(RUNS, viewer)
    live._asked.clear()
    with CaptureQueriesContext(connection) as first:
        live._render_page(RUNS, audience, [viewer.pk])
    with CaptureQueriesContext(connection) as second:
        _, page = live._render_page(RUNS, audience, [viewer.pk])
    assert len(second) < len(first)
    assert "op-1" in page.rows[0][1]


@pytest.mark.django_db
def test_a_topic_whose_subscriber_lost_its_audience_renders_nothing_once_asked_again(viewer, monkeypatch):
    live._asked.clear()
    monkeypatch.setattr(live, "AUDIENCE_FRESH_SECONDS", 0.0)  # ask every time
    assert live._render_page(RUNS, ("someone else",), [viewer.pk])[1] is None


@pytest.mark.django_db
def test_an_unchanged_run_row_is_not_rendered_again_and_a_changed_one_is(viewer, record_handoff, monkeypatch):
    stays = record_handoff("h-stays", "op-stays", "false_complete")
    changes = record_handoff("h-changes", "op-changes", "false_complete")
    rendered = _count_row_renders(monkeypatch)
    before = pages.render_live(RUNS, viewer)
    assert rendered["sidewisp/_run_row.html"] <= 2
    rendered.clear()
    again = pages.render_live(RUNS, viewer)
    assert rendered["sidewisp/_run_row.html"] == 0 and again.rows == before.rows
    Run.objects.filter(pk=changes.run_id).update(status="failed")
    after = pages.render_live(RUNS, viewer)
    assert rendered["sidewisp/_run_row.html"] == 1
    message = after.changes_since(again, [])
    assert f'id="run-row-{changes.run_id}"' in message and "task: Failed" in message
    assert f'<li id="run-row-{stays.run_id}"' not in message


@pytest.mark.django_db
def test_a_list_change_said_by_its_rows_does_not_render_the_whole_list(viewer, record_handoff, monkeypatch):
    record_handoff("h-1", "op-1", "false_complete")
    rendered = _count_row_renders(monkeypatch)
    before = pages.render_live(RUNS, viewer)
    record_handoff("h-2", "op-2", "false_complete")
    after = pages.render_live(RUNS, viewer)
    message = after.changes_since(before, [])
    assert "op-2" in message and 'id="runs-list"' not in message
    assert rendered["sidewisp/_runs_list.html"] == 0
    assert 'id="runs-list"' in after.snapshot()  # a newcomer gets the whole list


@pytest.mark.django_db(transaction=True)
def test_a_wait_committed_while_the_waits_page_renders_never_takes_another_rows_place(viewer, record_handoff):
    # The waits page counts its open waits, then reads them (a page sliced to that count): a sooner wait
    # committed between the two took the later one's place in that render, and the next render put the later
    # one back as a new element (what its reader had selected or focused there, gone).
    later = record_handoff("h-later", "op-later", "waiting")
    soon = datetime.now(UTC) + timedelta(minutes=5)
    topic = live.Topic(WAITS, pages.audience(WAITS, viewer))
    with _committed_after_the_first_read_of_open_waits(
        lambda: record_handoff("h-sooner", "op-sooner", "waiting", deadline=soon)
    ):
        _, first, _, _ = live._render_and_cut(topic, [viewer.pk], None, True)
    sooner = Handoff.objects.get(handoff_id="h-sooner")
    assert [row for row, _ in first.rows] == [f"wait-{later.pk}"]  # the database as it was when the render began
    _, second, _, (_, changes) = live._render_and_cut(topic, [viewer.pk], first, False)
    assert [row for row, _ in second.rows] == [f"wait-{sooner.pk}", f"wait-{later.pk}"]
    assert f'id="wait-{sooner.pk}"' in changes and f'id="wait-{later.pk}"' not in changes


@contextmanager
def _committed_after_the_first_read_of_open_waits(commit):
    """`commit()` runs on a connection of its own right after this thread's first query of the open waits."""
    done = []

    def hook(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if not done and '"wait_open"' in sql:
            done.append(ThreadPoolExecutor(1).submit(_on_own_connection, commit).result())
        return result

    with connection.execute_wrapper(hook):
        yield
    assert done, "the render read no open waits"


def _on_own_connection(work):
    try:
        return work()
    finally:
        connections.close_all()


def _queries(page: str, user) -> int:
    run = Run.objects.order_by("pk").first()
    scope = pages.PageScope(page, run_id=run.pk if page == "run" else None)
    pages.render_live(scope, user).snapshot()  # warm: content types, templates
    with CaptureQueriesContext(connection) as queries:
        pages.render_live(scope, user).snapshot()
    return len(queries)


def _count_row_renders(monkeypatch) -> Counter:
    counted: Counter = Counter()
    render_to_string = liverender.render_to_string

    def counting(template, context=None, *args, **kwargs):
        counted[template] += 1
        return render_to_string(template, context, *args, **kwargs)

    monkeypatch.setattr(liverender, "render_to_string", counting)
    return counted


@pytest.mark.django_db(transaction=True)
def test_a_viewer_and_an_approver_on_the_runs_list_share_one_render_per_change(viewer, owner, renders, record_handoff):
    cookies = [session_cookie(viewer), session_cookie(owner)]

    async def body():
        sockets = await open_sockets("/ws/health/?page=runs", *cookies)
        renders.clear()
        await database_sync_to_async(record_handoff)("h-shared", "op-shared", "false_complete")
        for communicator in sockets:
            await receive_until(communicator, "op-shared")
        assert len(renders) == 1  # rendered as one of them only: one topic, not one per role
        for communicator in sockets:
            await communicator.disconnect()

    run_async(body)


@pytest.mark.django_db(transaction=True)
def test_roles_still_get_their_own_renders_where_the_page_offers_actions(viewer, owner):
    runs, waits = pages.PageScope("runs"), pages.PageScope("waits")
    assert pages.audience(runs, viewer) == pages.audience(runs, owner)
    assert pages.audience(waits, viewer) != pages.audience(waits, owner)


@pytest.mark.django_db
def test_a_run_pages_unchanged_cards_are_not_rendered_again_and_a_changed_one_is(viewer, record_handoff, monkeypatch):
    first = record_handoff("h-first", "op-cards", "healthy")
    record_handoff("h-second", "op-cards", "healthy")
    scope = pages.PageScope("run", run_id=first.run_id)
    rendered = _count_row_renders(monkeypatch)
    before = pages.render_live(scope, viewer)
    assert rendered[liverender.CARD_TEMPLATE] == 2
    rendered.clear()
    record_handoff("h-third", "op-cards", "healthy")
    after = pages.render_live(scope, viewer)
    assert rendered[liverender.CARD_TEMPLATE] == 1  # the new handoff's card only
    assert "h-third" in after.changes_since(before, [])
    rendered.clear()
    Handoff.objects.filter(pk=first.pk).update(verdict="ROUTE_VIOLATION", boundary="route")
    changed = pages.render_live(scope, viewer)
    assert rendered[liverender.CARD_TEMPLATE] == 1
    assert 'data-verdict="ROUTE_VIOLATION"' in changed.fragments[0]
    liverender._rows.entries.clear()
    fresh = pages.render_live(scope, viewer)
    assert liverender._without_clock(fresh.fragments[0]) == liverender._without_clock(changed.fragments[0])


@pytest.mark.django_db
def test_a_run_pages_card_is_rendered_again_when_only_its_verdict_history_changed(viewer, record_handoff, monkeypatch):
    from sidewisp.pages import runpage

    handoff = record_handoff("h-changes", "op-changes", "healthy")
    scope = pages.PageScope("run", run_id=handoff.run_id)
    rendered = _count_row_renders(monkeypatch)
    pages.render_live(scope, viewer)
    pages.render_live(scope, viewer)
    assert rendered[liverender.CARD_TEMPLATE] == 1  # kept: the key digests its verdict changes' values
    read = runpage._verdict_history

    def another_cause(handoffs):  # the rows are append-only: the change read differently stands in for one
        history = read(handoffs)
        history[handoff.pk][-1].cause = "operator_override"
        return history

    monkeypatch.setattr(runpage, "_verdict_history", another_cause)
    changed = pages.render_live(scope, viewer).fragments[0]
    assert rendered[liverender.CARD_TEMPLATE] == 2
    assert 'data-cause="operator_override"' in changed


@pytest.mark.django_db
def test_a_run_pages_unchanged_history_entries_are_not_rendered_again_and_show_the_same(
    viewer, record_handoff, monkeypatch
):
    first = record_handoff("h-entry-1", "op-entries", "healthy")
    scope = pages.PageScope("run", run_id=first.run_id)
    rendered = _count_row_renders(monkeypatch)
    before = pages.render_live(scope, viewer).fragments[2]
    assert rendered[liverender.ENTRY_TEMPLATE] == before.count('class="row history-entry"') > 0
    rendered.clear()
    record_handoff("h-entry-2", "op-entries", "healthy")
    after = pages.render_live(scope, viewer).fragments[2]
    # The new handoff's entries only (its run's receipts and verdicts, each an entry of its own).
    assert rendered[liverender.ENTRY_TEMPLATE] == after.count('data-handoff="h-entry-2"') > 0
    assert after.count('data-handoff="h-entry-1"') == before.count('data-handoff="h-entry-1"')
    liverender._rows.entries.clear()
    fresh = pages.render_live(scope, viewer).fragments[2]
    assert rendered[liverender.ENTRY_TEMPLATE] > after.count('data-handoff="h-entry-2"')
    entries = re.compile(r'<li class="row history-entry".*?</li>', re.S)  # the timeline above draws `now`
    assert entries.findall(fresh) == entries.findall(after)


@pytest.mark.django_db
def test_a_run_pages_cards_are_never_reused_for_a_role_they_offer_nothing_to(viewer, owner, fake_runtime):
    run = test_live_hub._wait_without_event("h-wait", owner="ops-lead")
    scope = pages.PageScope("run", run_id=run.pk)
    deciding = pages.render_live(scope, owner).fragments[0]
    watching = pages.render_live(scope, viewer).fragments[0]  # rendered after the approver's card was kept
    assert "Approve…" in deciding
    assert "Approve…" not in watching and "/confirm/" not in watching


def test_the_run_pages_handoffs_share_the_one_run_read_with_them(record_handoff, monkeypatch):
    """The run page's timeline (issue 32 §3): each page of handoffs is the ORM's rows, in order, every field read,
    and their run is one object built from the same statement (a run instance per handoff was a tenth of the live
    run page's render CPU)."""
    from receipts.queries import dashboard

    for i in range(5):
        record_handoff(f"h-share-{i}", "op-share", "healthy" if i % 2 else "waiting")
    run = Run.objects.get(operation_id="op-share")
    built = Counter()
    from_db = Run.from_db.__func__
    monkeypatch.setattr(Run, "from_db", classmethod(lambda cls, *a: built.update([cls]) or from_db(cls, *a)))

    pages_ = [dashboard.run_timeline(run, limit=2, page=n) for n in (1, 2, 3)]

    assert built[Run] == 3  # one a page
    newest_first = list(Handoff.objects.filter(run=run).order_by("-created_at", "-pk"))
    expected = [newest_first[0:2][::-1], newest_first[2:4][::-1], newest_first[4:][::-1]]
    fields = [f.attname for f in Handoff._meta.concrete_fields]

    def values(handoffs) -> list[list]:
        return [[getattr(h, f) for f in fields] for h in handoffs]

    for page, rows in zip(pages_, expected, strict=True):
        assert values(v.handoff for v in page) == values(rows)
        assert {id(v.handoff.run) for v in page} == {id(page[0].handoff.run)}
        assert page[0].handoff.run.seq == Run.objects.get(pk=run.pk).seq
