"""The live hub: one render per change and audience, fanned out; first change at once; nothing lost or piled up."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter

import pytest
from channels.db import database_sync_to_async

from receipts.ingest import broadcast
from receipts.models import Handoff, Run
from sidewisp import pages
from sidewisp.live import hub as live
from sidewisp.live import threads
from tests.sidewisp.test_consumer import (
    ORIGIN,
    TIMEOUT,
    _event,
    marker,
    receive_until,
    run_async,
    session_cookie,
    socket,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def renders(monkeypatch) -> Counter:
    """How many times each page was rendered for the live sockets, by (page, username)."""
    counted: Counter = Counter()
    render_live = pages.render_live

    def counting(scope, user):
        counted[(scope.page, user.get_username())] += 1
        return render_live(scope, user)

    monkeypatch.setattr(pages, "render_live", counting)
    return counted


async def open_sockets(path: str, *cookies) -> list:
    """Connected sockets on `path`, one per cookie, each past its snapshot."""
    sockets = [socket(path, ORIGIN, cookie) for cookie in cookies]
    for communicator in sockets:
        assert (await communicator.connect())[0]
        assert marker(await communicator.receive_from(timeout=TIMEOUT))["kind"] == "snapshot"
    return sockets


def test_one_change_is_rendered_once_and_every_socket_of_the_page_gets_it(viewer, person, renders):
    watcher = person("watcher", "viewer")  # another user, the same role: the same fragments
    cookies = [session_cookie(viewer), session_cookie(viewer), session_cookie(watcher)]

    async def body():
        sockets = await open_sockets("/ws/health/?page=false", *cookies)
        renders.clear()
        run = await database_sync_to_async(_false_complete_without_event)("h-1")
        await broadcast._send(_event(run=run.pk, seq=1))
        for communicator in sockets:
            message = await receive_until(communicator, "h-1")
            assert marker(message) == {"kind": "events", "seqs": [[run.pk, [1]]]}
        assert sum(renders.values()) == 1
        for communicator in sockets:
            assert await communicator.receive_nothing(timeout=0.5)
            await communicator.disconnect()

    run_async(body)


def test_each_role_gets_its_own_render_and_never_another_roles_offers(viewer, owner, renders, fake_runtime):
    cookies = [session_cookie(viewer), session_cookie(owner)]

    async def body():
        watching, deciding = await open_sockets("/ws/health/?page=waits", *cookies)
        renders.clear()
        run = await database_sync_to_async(_wait_without_event)("h-wait", owner="ops-lead")
        await broadcast._send({**_event(run=run.pk, seq=1), "wait_open": True})
        seen = await receive_until(watching, "h-wait")
        decided = await receive_until(deciding, "h-wait")
        assert "Approve…" in decided and "Reject…" in decided
        assert "Approve…" not in seen and "/confirm/" not in seen
        assert renders == Counter({("waits", "viewer"): 1, ("waits", "ops-lead"): 1})
        for communicator in (watching, deciding):
            await communicator.disconnect()

    run_async(body)


def test_two_approvers_are_never_sent_each_others_decide_links(owner, person, renders, fake_runtime):
    # Same role, but deciding is for the wait's owner only: their fragments differ, so their renders do.
    other = person("deputy", "approver")
    cookies = [session_cookie(owner), session_cookie(other)]

    async def body():
        mine, theirs = await open_sockets("/ws/health/?page=waits", *cookies)
        run = await database_sync_to_async(_wait_without_event)("h-owned", owner="ops-lead")
        await broadcast._send({**_event(run=run.pk, seq=1), "wait_open": True})
        assert "Approve…" in await receive_until(mine, "h-owned")
        assert "Approve…" not in await receive_until(theirs, "h-owned")
        assert renders[("waits", "ops-lead")] >= 2 and renders[("waits", "deputy")] >= 2  # snapshot and change
        for communicator in (mine, theirs):
            await communicator.disconnect()

    run_async(body)


def test_a_new_run_is_sent_as_its_row_in_place_with_the_count(viewer, record_handoff):
    older = record_handoff("h-old", "op-old", "healthy")
    cookie = session_cookie(viewer)

    async def body():
        (communicator,) = await open_sockets("/ws/health/?page=runs", cookie)
        handoff = await database_sync_to_async(record_handoff)("h-new", "op-new", "false_complete")
        message = await receive_until(communicator, "op-new")
        # The new run goes before the older one (newest first); the older row is not sent again.
        assert f'hx-swap-oob="beforebegin:#run-row-{older.run_id}"' in message
        assert f'<li id="run-row-{handoff.run_id}"' in message
        assert f'id="run-row-{older.run_id}"' not in message.replace(f"#run-row-{older.run_id}", "")
        assert '<h2 id="runs-title" hx-swap-oob="true">2 runs' in message
        assert 'id="runs-list"' not in message  # not the whole list
        await communicator.disconnect()

    run_async(body)


def test_a_run_leaving_the_filter_is_removed_from_the_list(viewer, record_handoff):
    stays = record_handoff("h-stays", "op-stays", "false_complete")
    leaves = record_handoff("h-leaves", "op-leaves", "false_complete")
    cookie = session_cookie(viewer)

    async def body():
        path = "/ws/health/?page=runs&filters=verdict%3DFALSE_COMPLETE"
        (communicator,) = await open_sockets(path, cookie)
        await database_sync_to_async(Handoff.objects.filter(pk=leaves.pk).update)(verdict="HEALTHY")
        await broadcast._send(_event(run=leaves.run_id, seq=99))
        message = await receive_until(communicator, "&quot;events&quot;")
        assert f'<div id="run-row-{leaves.run_id}" hx-swap-oob="delete"></div>' in message
        assert f"run-row-{stays.run_id}" not in message
        assert '<h2 id="runs-title" hx-swap-oob="true">1 run matching' in message
        await communicator.disconnect()

    run_async(body)


# --- the hub's scheduling, with a stand-in render (no database) ------------------------------


class Page:
    """A subscriber that keeps what it was sent."""

    def __init__(self, user_id: int = 1) -> None:
        self.user_id = user_id
        self.messages: asyncio.Queue[str] = asyncio.Queue()

    async def deliver(self, html: str) -> None:
        await self.messages.put(html)

    async def next(self, timeout: float = TIMEOUT) -> dict:
        return marker(await asyncio.wait_for(self.messages.get(), timeout))


class StandInRender:
    """Counts renders and the most at once; a render can be held until released."""

    def __init__(self) -> None:
        self.count = 0
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()
        self.hold = threading.Event()
        self.hold.set()
        self.started = threading.Event()

    def __call__(self, scope, audience, user_ids):
        with self.lock:
            self.count += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        self.started.set()
        self.hold.wait(TIMEOUT)
        with self.lock:
            self.running -= 1
        return (self.count,), pages.LivePage(scope, (f'<p id="n">{self.count}</p>',))


@pytest.fixture
def stand_in(monkeypatch) -> StandInRender:
    """A render that reads no database: nor does the snapshot it would be read from (tests without `db`)."""
    render = StandInRender()
    monkeypatch.setattr(live, "_render_page", render)
    monkeypatch.setattr(live, "one_snapshot", contextlib.nullcontext)
    # A render thread may still hold the connection an earlier test's render opened: nothing here may touch it.
    monkeypatch.setattr(threads, "close_old_connections", lambda: None)
    return render


SCOPE = pages.PageScope("overview")


def test_a_lone_change_is_sent_at_once_and_what_follows_waits_for_the_window(stand_in, monkeypatch):
    monkeypatch.setattr(live, "COALESCE_SECONDS", 30.0)  # longer than any test waits

    async def body():
        hub, page = live.Hub(), Page()
        topic = hub.subscribe(page, SCOPE, ("viewer",))
        assert (await page.next())["kind"] == "snapshot"
        hub.dispatch({"type": "health.event", "event": _event(run=7, seq=1)})
        assert await page.next() == {"kind": "events", "seqs": [[7, [1]]]}  # no wait for the window
        hub.dispatch({"type": "health.events", "events": [_event(run=7, seq=2), _event(run=7, seq=3)]})
        with pytest.raises(TimeoutError):
            await page.next(timeout=0.5)  # within the window: collected, not rendered yet
        assert stand_in.count == 2
        await hub.unsubscribe(page, topic)

    run_async(body)


def test_changes_during_a_render_are_rendered_after_it_not_beside_it(stand_in, monkeypatch):
    monkeypatch.setattr(live, "COALESCE_SECONDS", 0.0)

    async def body():
        hub, page = live.Hub(), Page()
        topic = hub.subscribe(page, SCOPE, ("viewer",))
        assert (await page.next())["kind"] == "snapshot"
        stand_in.hold.clear()
        stand_in.started.clear()
        hub.dispatch({"type": "health.event", "event": _event(run=7, seq=1)})
        await asyncio.get_running_loop().run_in_executor(None, stand_in.started.wait, TIMEOUT)
        for seq in (2, 3, 4):
            hub.dispatch({"type": "health.event", "event": _event(run=7, seq=seq)})
        stand_in.hold.set()
        assert await page.next() == {"kind": "events", "seqs": [[7, [1]]]}
        assert await page.next() == {"kind": "events", "seqs": [[7, [2, 3, 4]]]}
        assert stand_in.count == 3 and stand_in.most_at_once == 1
        await hub.unsubscribe(page, topic)

    run_async(body)


def test_a_page_that_joins_gets_a_snapshot_while_the_others_get_only_the_change(stand_in):
    async def body():
        hub, first, second = live.Hub(), Page(), Page()
        topic = hub.subscribe(first, SCOPE, ("viewer",))
        assert (await first.next())["kind"] == "snapshot"
        hub.subscribe(second, SCOPE, ("viewer",))
        assert (await second.next())["kind"] == "snapshot"
        assert await first.next() == {"kind": "events", "seqs": []}  # the render changed <p id="n">
        await hub.unsubscribe(first, topic)
        await hub.unsubscribe(second, topic)
        assert not hub.topics and hub.listener is None

    run_async(body)


def test_an_event_published_as_soon_as_a_page_has_its_snapshot_reaches_it_however_slowly_the_hub_joins(
    viewer, monkeypatch
):
    # The snapshot is the page's baseline: an event after it but before the hub joined the health group was
    # lost, so a page never saw the run's sequence skip (issue 29 item 6, the e2e resync test's flake).
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    group_add = layer.group_add
    published = threading.Event()

    async def slow_group_add(group, channel):
        # Redis slow to answer the subscription: until the page published its event (a hub that sent the snapshot
        # first lost it, however long the render took), or half the probe's bound (a hub that waits for it).
        await asyncio.to_thread(published.wait, live.PROBE_SECONDS / 2)
        await group_add(group, channel)

    monkeypatch.setattr(layer, "group_add", slow_group_add)
    cookie = session_cookie(viewer)

    async def body():
        (communicator,) = await open_sockets("/ws/health/?page=false", cookie)
        run = await database_sync_to_async(_false_complete_without_event)("h-early")
        await broadcast._send(_event(run=run.pk, seq=1))
        published.set()
        message = await receive_until(communicator, "h-early")
        assert marker(message) == {"kind": "events", "seqs": [[run.pk, [1]]]}
        await communicator.disconnect()

    run_async(body)


def _false_complete_without_event(handoff_id: str) -> Run:
    run = Run.objects.create(operation_id=f"op-{handoff_id}", thread_id=f"t-{handoff_id}")
    Handoff.objects.create(handoff_id=handoff_id, run=run, verdict="FALSE_COMPLETE")
    return run


def _wait_without_event(handoff_id: str, *, owner: str) -> Run:
    from datetime import UTC, datetime, timedelta

    run = Run.objects.create(operation_id=f"op-{handoff_id}", thread_id=f"t-{handoff_id}")
    Handoff.objects.create(
        handoff_id=handoff_id,
        run=run,
        verdict="WAITING_ON_APPROVAL",
        wait_open=True,
        wait_owner=owner,
        wait_part={"reason": "refund over the limit"},
        wait_deadline=datetime.now(UTC) + timedelta(hours=1),
    )
    return run
