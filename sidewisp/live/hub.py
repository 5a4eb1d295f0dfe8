"""The live pages' hub: one render per change and page, fanned out to every socket showing it.

One hub per server process (per event loop) listens to the health group for all its sockets. A socket subscribes
with its page (`pages.PageScope`) and its audience (`pages.audience`: what decides the offers in its fragments);
sockets with the same page and audience form a topic and are sent one and the same render, never a render made for
another audience.

Per topic: a change that finds the topic idle is rendered SETTLE_SECONDS later (the parts recorded one by one with it
come in the same render); what follows is collected and rendered COALESCE_SECONDS after the previous render started,
and at most one render is in flight (changes arriving meanwhile are rendered when it ends; none is dropped). A render
names every change noted until its thread starts reading the database (each was published after its commit, so the
render, read as of one moment, shows it), also those noted while it waited for a free thread. Renders run on threads
of their own (`sidewisp.live.threads`), not on the single thread-sensitive one that Django's sync code shares; each
keeps its database connection while busy. A newcomer (connect, resync) gets a snapshot cut from the topic's next
render once the hub is in the health group (an event published before would be lost unseen; Redis down: sent
PROBE_SECONDS later); every other subscriber gets what changed since the previous one (list pages: the rows), so
every subscriber of a topic always shows the same render. Every RESYNC_SECONDS an idle topic compares the database's
change marker with the one read before its last render and, when they differ, renders again and sends everyone what
changed since: events lost on the way (Redis down) are repaired without replacing what did not change.

Every PROBE_SECONDS the hub sends itself a message through the channel layer (issue 19 §2): when it does not come
back in time, every page is told "Live updates paused" (`sidewisp/_live_status.html`), and "Connected" again once one
does; a socket that opens meanwhile is told at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.db import DatabaseError
from django.template.loader import render_to_string

from receipts.ingest.broadcast import HEALTH_GROUP
from sidewisp import pages  # the renderer's names, looked up where they were (tests replace render_live)
from sidewisp.live import revocations
from sidewisp.live.render import cut_messages
from sidewisp.live.threads import on_render_thread, one_snapshot

logger = logging.getLogger(__name__)

COALESCE_SECONDS = 0.03
# A change that finds its topic idle is rendered this soon: the parts recorded one by one with it (each
# its own event, milliseconds apart) come in one render, not a half-recorded handoff and then the rest.
SETTLE_SECONDS = 0.02
# This often an idle topic asks whether the database changed since its last render (one cheap query).
RESYNC_SECONDS = 5.0
# A topic renders as one of its subscribers whose audience was asked at most this long ago (each socket
# checks its own user every RESYNC_SECONDS; this only decides whose eyes a render is made for).
AUDIENCE_FRESH_SECONDS = 1.0
# After the channel layer failed (Redis down), try to listen again after this long.
RELISTEN_SECONDS = 0.5
# This often the hub sends itself a probe through the channel layer; one not back this long after is a failure.
PROBE_SECONDS = 2.0
LIVE_WORDS = {
    True: ("open", "Connected"),
    False: ("paused", "Live updates paused: the event channel is not answering. This page catches up every {} s."),
}


class Subscriber(Protocol):
    """A socket as the hub sees it: whose page it is, and how to hand it a message."""

    user_id: int

    async def deliver(self, html: str) -> None: ...


@dataclass(eq=False)
class Topic:
    """The sockets showing one page to one audience, and what their next render owes them."""

    scope: pages.PageScope
    audience: tuple
    subscribers: dict[Subscriber, None] = field(default_factory=dict)  # an ordered set
    newcomers: set[Subscriber] = field(default_factory=set)  # owed a snapshot
    pending: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))  # run -> event seqs
    dirty: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)  # `pending` and `dirty`: render threads take them
    shown: pages.LivePage | None = None  # the last render every subscriber was brought to
    marker: tuple | None = None  # the change marker read before that render
    last_render: float = float("-inf")  # when the last render of a change started
    task: asyncio.Task | None = None
    ticker: asyncio.Task | None = None
    renders: int = 0  # for the tests and the benchmark
    named: dict[int, set[int]] = field(default_factory=dict)  # the events the last render named (the same)

    def take_pending(self) -> dict[int, set[int]]:
        """On the render's thread, before it reads the database: the changes noted so far, which it shows."""
        with self.lock:
            seqs, self.pending = self.pending, defaultdict(set)
            self.dirty = False
            return seqs


class Hub:
    def __init__(self) -> None:
        self.topics: dict[tuple[pages.PageScope, tuple], Topic] = {}
        self.listener: asyncio.Task | None = None
        self.prober: asyncio.Task | None = None
        self.channel: str | None = None  # the listener's own channel, which the probes go to
        self.layer_ok = True  # the last probe came back (or none has been sent yet)
        self.probes = 0
        self._probe_back: asyncio.Event | None = None
        self._sends: set[asyncio.Task] = set()
        self.listening = asyncio.Event()  # set once the listener is in the health group (`_listen`)

    # --- subscriptions ------------------------------------------------------------

    def subscribe(self, subscriber: Subscriber, scope: pages.PageScope, audience: tuple) -> Topic:
        """Add `subscriber` to its topic; it is sent a snapshot at once (cut from the topic's next render)."""
        topic = self.topics.get((scope, audience))
        if topic is None:
            topic = self.topics[(scope, audience)] = Topic(scope, audience)
            topic.ticker = asyncio.create_task(self._tick(topic))
        topic.subscribers[subscriber] = None
        self._listen()
        self.resync(subscriber, topic)
        if not self.layer_ok:
            # Its own message, not the snapshot's: the page's status line says it until the layer answers.
            task = asyncio.create_task(_gather([subscriber.deliver(_live_status(ok=False))]))
            self._sends.add(task)  # held until sent: the loop keeps only a weak reference
            task.add_done_callback(self._sends.discard)
        return topic

    async def unsubscribe(self, subscriber: Subscriber, topic: Topic) -> None:
        topic.subscribers.pop(subscriber, None)
        topic.newcomers.discard(subscriber)
        if topic.subscribers:
            return
        for task in (topic.task, topic.ticker):
            if task is not None:
                task.cancel()
        if self.topics.get((topic.scope, topic.audience)) is topic:
            del self.topics[(topic.scope, topic.audience)]
        if not self.topics and self.listener is not None:
            listener, self.listener = self.listener, None
            listener.cancel()  # nobody left to listen for
            if self.prober is not None:
                self.prober.cancel()
                self.prober = None
            # Leave the group before the last socket is gone, but not for longer than a moment: the
            # pub/sub layer's clean-up of a cancelled receive can wait on Redis.
            await asyncio.wait({listener}, timeout=RELISTEN_SECONDS)

    def resync(self, subscriber: Subscriber, topic: Topic) -> None:
        """Send `subscriber` a fresh snapshot (with the topic's next render, which starts now if idle)."""
        topic.newcomers.add(subscriber)
        self._render_soon(topic)

    # --- events -------------------------------------------------------------------

    def _listen(self) -> None:
        if self.listener is None:
            self.listening = asyncio.Event()  # this listener's own: one cancelled before never clears it
            self.listener = asyncio.create_task(self._receive_events(self.listening))
        if self.prober is None:
            self.prober = asyncio.create_task(self._probe())

    async def _receive_events(self, listening: asyncio.Event) -> None:
        layer = get_channel_layer()
        channel = self.channel = None
        try:
            while True:
                try:
                    if channel is None:  # the pub/sub layer subscribes to make one: Redis may be down then too
                        channel = self.channel = await layer.new_channel()
                    await layer.group_add(HEALTH_GROUP, channel)
                    listening.set()
                    while True:
                        self.dispatch(await layer.receive(channel))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - Redis down: the periodic snapshot repairs the pages
                    logger.warning("live events interrupted: %s", type(exc).__name__)
                    await asyncio.sleep(RELISTEN_SECONDS)
        finally:
            listening.clear()
            if channel is not None:
                with contextlib.suppress(Exception):
                    await layer.group_discard(HEALTH_GROUP, channel)

    def dispatch(self, message: dict) -> None:
        """A message from the health group: one event, or a batch of them (or the hub's own probe)."""
        if message.get("type") == "live.probe":
            if message.get("n") == self.probes and self._probe_back is not None:
                self._probe_back.set()
            return
        if message.get("type") == revocations.USER_CHANGED:  # issue 29 §7: that user's sockets stop, are checked
            return self._revoke(message.get("user"), str(message.get("session") or ""))
        if message.get("type") == "health.events":
            events = message.get("events") or []
        elif message.get("type") == "health.event":
            events = [message.get("event") or {}]
        else:
            return
        for event in events:
            if isinstance(event, dict):
                self._note(event)

    def _revoke(self, user_id: object, session: str) -> None:
        for subscriber in [s for topic in self.topics.values() for s in topic.subscribers if s.user_id == user_id]:
            getattr(subscriber, "revoke", lambda session: None)(session)

    def _note(self, event: dict) -> None:
        run, seq = event.get("run"), event.get("seq")
        for topic in self.topics.values():
            if not topic.scope.is_affected_by(event):
                continue
            with topic.lock:
                topic.dirty = True
                if isinstance(run, int) and isinstance(seq, int):
                    topic.pending[run].add(seq)
            self._render_soon(topic)

    # --- is the layer answering? ----------------------------------------------------

    async def _probe(self) -> None:
        layer = get_channel_layer()
        while True:
            await asyncio.sleep(PROBE_SECONDS)
            # A listener still without its channel a probe's interval after it started is a layer not answering
            # too (the pub/sub layer subscribes to make one: Redis gone at that moment left pages "Connected").
            await self._note_layer(self.channel is not None and await self._round_trip(layer, self.channel))

    async def _round_trip(self, layer, channel: str) -> bool:
        """Whether a message sent through the layer to the listener's channel came back within PROBE_SECONDS."""
        self.probes += 1
        self._probe_back = back = asyncio.Event()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PROBE_SECONDS
        try:
            await asyncio.wait_for(layer.send(channel, {"type": "live.probe", "n": self.probes}), PROBE_SECONDS)
            await asyncio.wait_for(back.wait(), max(deadline - loop.time(), 0.01))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - Redis down shows as a timeout or any of the client's errors
            return False
        return True

    async def _note_layer(self, ok: bool) -> None:
        if ok == self.layer_ok:
            return
        self.layer_ok = ok
        if ok:
            logger.info("live updates resumed: the channel layer answers again")
        else:
            logger.warning("live updates paused: the channel layer did not answer within %.1f s", PROBE_SECONDS)
        html = _live_status(ok=ok)
        await _gather(s.deliver(html) for topic in list(self.topics.values()) for s in list(topic.subscribers))

    # --- rendering ----------------------------------------------------------------

    def _render_soon(self, topic: Topic) -> None:
        if topic.task is None:
            topic.task = asyncio.create_task(self._drain(topic))

    async def _drain(self, topic: Topic) -> None:
        # One loop per topic while there is something to render: no second render starts beside it.
        loop = asyncio.get_running_loop()
        settle = SETTLE_SECONDS  # the change that found the topic idle waits for the rest of its burst
        try:
            while topic.dirty or topic.newcomers:
                # What follows a change's render waits out the window (from that render's start).
                wait = max(settle, topic.last_render + COALESCE_SECONDS - loop.time())
                settle = 0.0
                if wait > 0 and not topic.newcomers:
                    await asyncio.sleep(wait)
                if topic.newcomers and not self.listening.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.listening.wait(), PROBE_SECONDS)
                if topic.dirty:
                    topic.last_render = loop.time()
                await self._render(topic)
        finally:
            topic.task = None

    async def _render(self, topic: Topic) -> None:
        newcomers, topic.newcomers = topic.newcomers, set()
        user_ids = list(dict.fromkeys(s.user_id for s in topic.subscribers))
        try:
            marker, page, seqs, (snapshot, changes) = await on_render_thread(
                _render_and_cut, topic, user_ids, topic.shown, bool(newcomers)
            )
        except DatabaseError:
            # The pages stay as they were; the next event, resync or periodic snapshot repairs them.
            logger.warning("live fragments not rendered", exc_info=True)
            return
        except Exception:  # a page that cannot render must not end live updates for the process
            logger.exception("live fragments not rendered")
            return
        topic.renders += 1
        topic.named = seqs
        if page is None:
            return
        topic.shown, topic.marker = page, marker
        sends = []
        for subscriber in list(topic.subscribers):
            if subscriber in topic.newcomers:
                continue  # came while this render ran: its snapshot comes with the next one
            html = snapshot if subscriber in newcomers else changes
            if html:
                sends.append(subscriber.deliver(html))
        await _gather(sends)

    async def _tick(self, topic: Topic) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            if topic.task is not None:
                continue  # a render is due anyway: it reads a fresh marker
            try:
                marker = await on_render_thread(pages.change_marker, topic.scope)
            except DatabaseError:
                logger.warning("live change marker not read", exc_info=True)
                continue
            if topic.shown is None:
                topic.newcomers.update(topic.subscribers)  # nothing rendered yet to compare with
            elif marker != topic.marker:
                # Every subscriber shows the topic's last render: what changed since is the repair. A
                # whole snapshot would replace elements a reader may be looking at for no reason.
                topic.dirty = True
            else:
                continue
            self._render_soon(topic)


def _live_status(*, ok: bool) -> str:
    """The page's status line, swapped out of band: "Connected", or "Live updates paused" and why."""
    state, words = LIVE_WORDS[ok]
    context = {"state": state, "words": words.format(f"{RESYNC_SECONDS:g}"), "oob": True}
    return render_to_string("sidewisp/_live_status.html", context)


async def _gather(sends: Iterable) -> None:
    for result in await asyncio.gather(*sends, return_exceptions=True):
        if isinstance(result, Exception):
            # A socket closing while it is sent to; it unsubscribes itself.
            logger.debug("live message not delivered: %s", type(result).__name__)


def _render_and_cut(
    topic: Topic, user_ids: list[int], shown, snapshot: bool
) -> tuple[tuple, pages.LivePage | None, dict, tuple[str, str]]:
    """On a render thread, in one trip (a second one waited for the loop and a thread again: tens of ms under
    load): the changes it names (`Topic.take_pending`), then the render (`_render_page`) and the messages cut
    from it against `shown` (`render.cut_messages`), all read from one snapshot of the database (`one_snapshot`)."""
    seqs = topic.take_pending()
    with one_snapshot():
        marker, page = _render_page(topic.scope, topic.audience, user_ids)
        messages = cut_messages(page, shown, seqs, snapshot, topic.audience) if page is not None else ("", "")
    return marker, page, seqs, messages


def _render_page(scope: pages.PageScope, audience: tuple, user_ids: list[int]) -> tuple[tuple, pages.LivePage | None]:
    """On a render thread: the marker first (a change during the render shows at the next tick), then the
    page for a subscriber whose audience (asked at most AUDIENCE_FRESH_SECONDS ago) is still the topic's;
    nobody's, if none is."""
    marker = pages.change_marker(scope)
    user = _render_as(scope, audience, user_ids)
    return marker, (pages.render_live(scope, user) if user is not None else None)


def _render_as(scope: pages.PageScope, audience: tuple, user_ids: list[int]):
    key, now = (scope, audience, tuple(user_ids)), time.monotonic()
    with _asked_lock:
        asked_at, user = _asked.get(key, (float("-inf"), None))
    if now - asked_at < AUDIENCE_FRESH_SECONDS:
        return user
    by_id = {user.pk: user for user in get_user_model()._default_manager.filter(pk__in=user_ids, is_active=True)}
    user = next((u for u in map(by_id.get, user_ids) if u is not None and pages.audience(scope, u) == audience), None)
    with _asked_lock:
        for old in [k for k, (at, _) in _asked.items() if now - at >= AUDIENCE_FRESH_SECONDS]:
            del _asked[old]
        _asked[key] = (now, user)
    return user


# Whom a topic renders as, by (scope, audience, subscribers' ids): (when asked, the user or None).
_asked: dict[tuple, tuple[float, object]] = {}
_asked_lock = threading.Lock()


_hubs: dict[asyncio.AbstractEventLoop, Hub] = {}


def hub() -> Hub:
    """This event loop's hub (one per server process; a test's loop gets its own)."""
    loop = asyncio.get_running_loop()
    for other in [other for other in _hubs if other.is_closed()]:
        del _hubs[other]
    return _hubs.setdefault(loop, Hub())
