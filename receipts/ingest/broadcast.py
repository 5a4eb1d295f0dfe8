"""The one module that sends health events from workers to browsers.

Events are minimized (ids, codes, times, a per-run sequence) and best effort:
the channel layer may drop them, and the pages resync from the database on
every (re)connect. Publishing therefore never raises into the caller.

Sending goes through one event loop per process, on a thread of its own, so
the channel layer keeps one Redis connection instead of a new loop and a new
connection per event; the loop sends queued messages in order. Inside
`batched()` (the evidence writer wraps each batch in it) events are collected
and queued as one `health.events` message, and the writer does not wait for
Redis; `publish` outside a batch waits for its send and says whether it
went. A lone event is sent as `health.event`.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from typing import Literal, NotRequired, TypedDict

from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

HEALTH_GROUP = "health"
PUBLISH_TIMEOUT_SECONDS = 2.0


class HandoffEvent(TypedDict):
    type: Literal["handoff.changed"]
    run: int
    operation_id: str
    seq: int
    handoff: int
    handoff_id: str
    part: str
    verdict: str
    boundary: str | None
    final_status: str | None
    wait_open: bool
    dry_run: bool
    at: str


class RunEvent(TypedDict):
    type: Literal["run.changed"]
    run: int
    operation_id: str
    seq: int
    status: str
    health: NotRequired[str]  # receipts.ingest.health's level, when the run's health is known
    dry_run: bool
    at: str


class ReportEvent(TypedDict):
    type: Literal["report.added"]
    run: int
    operation_id: str
    seq: int
    agent: str
    kind: str
    dry_run: bool
    at: str


HealthEvent = HandoffEvent | RunEvent | ReportEvent


def publish(event: HealthEvent) -> bool:
    """Send one event to every open page (or add it to the current `batched()` block); False when it could not."""
    collected = getattr(_collecting, "events", None)
    if collected is not None:
        collected.append(event)
        return True
    return publish_many([event])


def publish_many(events: Sequence[HealthEvent], *, wait: bool = True) -> bool:
    """Send `events` to every open page as one channel-layer message; False (and a log line) when it could not.

    `wait=False` only queues them (True unless even that failed); the send's failure is logged all the same.
    """
    if not events:
        return True
    try:
        sent = _publisher().put([dict(event) for event in events])
        return sent.result(PUBLISH_TIMEOUT_SECONDS + 1) if wait else True
    except Exception as exc:  # noqa: BLE001 - best effort by design: never fail the recording
        logger.warning("health events not published (%d): %s", len(events), type(exc).__name__)
        return False


@contextlib.contextmanager
def batched() -> Iterator[None]:
    """Collect the events published inside the block (after-commit ones included) and send them once at its end."""
    if getattr(_collecting, "events", None) is not None:
        yield  # an outer block sends them
        return
    _collecting.events = []
    try:
        yield
    finally:
        events, _collecting.events = _collecting.events, None
        publish_many(events, wait=False)


async def _send(event: HealthEvent) -> None:
    """Send one event now, from async code (as `health.event`)."""
    await _send_many([dict(event)])


async def _send_many(events: list[dict]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    if len(events) == 1:
        message = {"type": "health.event", "event": events[0]}
    else:
        message = {"type": "health.events", "events": events}
    await asyncio.wait_for(layer.group_send(HEALTH_GROUP, message), PUBLISH_TIMEOUT_SECONDS)


class _Publisher:
    """This process's sender: an event loop on its own thread that sends queued messages one after another."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.queue: asyncio.Queue[tuple[list[dict], concurrent.futures.Future]] = asyncio.Queue(MAX_QUEUED_MESSAGES)
        threading.Thread(
            target=self.loop.run_until_complete, args=(self._drain(),), name="sidewisp-publisher", daemon=True
        ).start()

    def put(self, events: list[dict]) -> concurrent.futures.Future:
        """Queue one message; the future says (True or False) whether it was sent."""
        sent: concurrent.futures.Future = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(self._put, events, sent)
        return sent

    def _put(self, events: list[dict], sent: concurrent.futures.Future) -> None:
        try:
            self.queue.put_nowait((events, sent))
        except asyncio.QueueFull:  # Redis is away and the backlog is full: the pages resync from the database
            logger.warning("health events not published (%d): %d messages wait", len(events), self.queue.qsize())
            sent.set_result(False)

    async def _drain(self) -> None:
        while True:
            events, sent = await self.queue.get()
            try:
                await _send_many(events)
            except Exception as exc:  # noqa: BLE001 - best effort by design: the next message goes on
                logger.warning("health events not published (%d): %s", len(events), type(exc).__name__)
                sent.set_result(False)
            else:
                sent.set_result(True)
            finally:
                self.queue.task_done()

    def wait_sent(self, timeout: float) -> None:
        """Block until every queued message went (or failed), at most `timeout` seconds."""
        asyncio.run_coroutine_threadsafe(self.queue.join(), self.loop).result(timeout)


MAX_QUEUED_MESSAGES = 10_000
_collecting = threading.local()
_lock = threading.Lock()
_current: _Publisher | None = None


def _publisher() -> _Publisher:
    """This process's publisher, started on first use (a forked child starts its own)."""
    global _current
    with _lock:
        if _current is None:
            _current = _Publisher()
        return _current


def _forget_publisher_after_fork() -> None:
    global _current, _lock
    _current, _lock = None, threading.Lock()  # the parent's loop thread does not exist here


def _send_queued_at_exit() -> None:
    # A process that ends right after a batch (a script, a command) would otherwise drop its last events.
    if _current is not None:
        with contextlib.suppress(Exception):
            _current.wait_sent(EXIT_WAIT_SECONDS)


EXIT_WAIT_SECONDS = 2.0
os.register_at_fork(after_in_child=_forget_publisher_after_fork)
atexit.register(_send_queued_at_exit)
