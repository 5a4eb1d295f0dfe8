"""The live pages' WebSocket: a subscriber of this process's live hub (sidewisp.live.hub).

connect = check the user → subscribe to the hub with the page and the user's
audience → accept; the hub sends the snapshot, then what changed. The socket
itself only guards: every few seconds it re-checks the user (logged out,
deactivated or no longer a viewer: closed; another role: moved to the topic
of its new audience, with a snapshot), and it answers a page's resync. A logout
or a deactivation is not waited for: the hub is told (sidewisp.live.revocations)
and the socket is sent nothing more, then closed (or, still allowed, re-sent a
snapshot) at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from asgiref.sync import sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth import get_user_model

from sidewisp import pages
from sidewisp.live import hub as live
from sidewisp.live import revocations
from sidewisp.ops import health

logger = logging.getLogger(__name__)

MAX_RESYNCS_PER_MINUTE = 30
MAX_INBOUND_FRAME = 64  # {"type": "resync"} with room for whitespace
# This often the socket looks at the system banner's facts (cached; a stopped worker shows within 10 s).
SYSTEM_SECONDS = 2.0


class HealthConsumer(AsyncWebsocketConsumer):
    # The hub, not each socket, listens to the health group.
    groups: list[str] = []
    # Nor does a socket need a channel of its own: without one it opens while Redis is down, shows the page
    # from the database and says "Live updates paused" (issue 19 §2) instead of hanging in its handshake.
    channel_layer_alias = None

    async def connect(self) -> None:
        self.topic: live.Topic | None = None
        self.delivered = asyncio.Event()  # the hub's snapshot went out: the page has its baseline
        self.watchers: list[asyncio.Task] = []
        self.held = False  # sent nothing while its user is being checked or it is closing
        self.resyncs: list[float] = []
        page_scope = pages.PageScope.from_query_string(self.scope.get("query_string", b""))
        user = self.scope.get("user")
        audience = await _audience(page_scope, user, self.scope.get("session")) if page_scope else None
        if audience is None:
            await self.close()
            return
        self.user_id = user.pk
        await self.accept()
        self.topic = live.hub().subscribe(self, page_scope, audience)
        self.watchers = [asyncio.create_task(self._watch_user()), asyncio.create_task(self._watch_system())]
        if _asks_for_title_count(self.scope.get("query_string", b"")):  # the page's script asks (static/js/inbox.js)
            self.watchers.append(asyncio.create_task(self._watch_my_waits()))

    async def disconnect(self, code: int) -> None:
        for task in self.watchers:
            task.cancel()
        if self.topic is not None:
            topic, self.topic = self.topic, None
            await live.hub().unsubscribe(self, topic)

    async def deliver(self, html: str) -> None:
        if not self.held:
            await self.send(text_data=html)
            self.delivered.set()

    def revoke(self, session: str) -> None:
        """The hub was told this socket's user logged out or changed: nothing more is sent until checked."""
        if self.held or self.topic is None:
            return
        self.held = True
        self.watchers.append(asyncio.create_task(self._recheck(session)))

    async def _recheck(self, session: str) -> None:
        own = self.scope.get("session")
        if session and own is not None and session == revocations.session_digest(own.session_key):
            await self.close()  # this session logged out (it is flushed just after the signal)
            return
        audience = await _audience(self.topic.scope, self.scope.get("user"), own)
        if audience is None:
            await self.close()
            return
        self.held = False
        hub = live.hub()
        if audience != self.topic.audience:
            await hub.unsubscribe(self, self.topic)
            self.topic = hub.subscribe(self, self.topic.scope, audience)  # with a snapshot
        else:
            hub.resync(self, self.topic)  # what it was not sent meanwhile

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # The only message a page sends: {"type": "resync"} after it saw a gap. Anything else,
        # including a frame too long to be that message (deep nesting), is ignored unparsed.
        if not text_data or len(text_data) > MAX_INBOUND_FRAME or self.topic is None:
            return
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            if json.loads(text_data).get("type") == "resync" and self._resync_allowed():
                live.hub().resync(self, self.topic)

    async def _watch_user(self) -> None:
        while True:
            await asyncio.sleep(live.RESYNC_SECONDS)
            audience = await _audience(self.topic.scope, self.scope.get("user"), self.scope.get("session"))
            if audience is None:
                self.held = True
                await self.close()  # logged out, deactivated or no longer a viewer
                return
            if audience != self.topic.audience:
                # Another role now: its fragments come from the topic of that audience.
                hub = live.hub()
                await hub.unsubscribe(self, self.topic)
                self.topic = hub.subscribe(self, self.topic.scope, audience)

    async def _watch_system(self) -> None:
        # The system banner (workers, beat) is pushed when it changes: a cached ping, no database query.
        # The page rendered it on load, so the first look only sets what it shows.
        shown = await sync_to_async(health.banner, thread_sensitive=False)()
        while True:
            await asyncio.sleep(SYSTEM_SECONDS)
            system = await sync_to_async(health.banner, thread_sensitive=False)()
            if system != shown and not self.held:
                await self.send(text_data=health.render_banner_oob(system))
                shown = system

    async def _watch_my_waits(self) -> None:
        # The tab title's count of the open waits this user owns, and the newest of them for the page's notifier
        # (issue 30 §7): per user, so per socket, not per topic; pushed when it changes (the page rendered it).
        # The page is rendered without it (no query on every page): the first look is sent right after the
        # hub's snapshot (which stays the socket's first message).
        await self.delivered.wait()
        shown = None
        while True:
            mine = await live.on_render_thread(_my_waits_now, self.user_id)
            if mine != shown:
                await self.send(text_data=mine)
                shown = mine
            await asyncio.sleep(SYSTEM_SECONDS)

    def _resync_allowed(self) -> bool:
        now = asyncio.get_running_loop().time()
        self.resyncs = [t for t in self.resyncs if now - t < 60] + [now]
        return len(self.resyncs) <= MAX_RESYNCS_PER_MINUTE


async def _audience(scope: pages.PageScope, user, session) -> tuple | None:
    """The user's audience for the page, asked fresh (on the hub's render threads); None when they may not
    view it any more (logged out, deactivated, no longer a viewer)."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    return await live.on_render_thread(_audience_now, scope, user, session)


def _audience_now(scope: pages.PageScope, user, session) -> tuple | None:
    if session is not None and session.session_key and not session.exists(session.session_key):
        return None  # logged out since the socket opened
    # A fresh copy: permissions are cached on the user object for the socket's lifetime.
    fresh = get_user_model()._default_manager.filter(pk=user.pk, is_active=True).first()
    if fresh is None or not fresh.has_perm(pages.VIEWER_PERMISSION):
        return None
    if pages.team_refused(scope, fresh):
        return None  # a `?team=` that is not (or no longer) theirs (issue 22 §2)
    return pages.audience(scope, fresh)


def _my_waits_now(user_id: int) -> str:
    """The header's `#my-waits` marker for this user as an out-of-band swap ("" when they may not see waits)."""
    from django.template.loader import render_to_string

    from sidewisp.pages.inbox import my_waits

    user = get_user_model()._default_manager.filter(pk=user_id, is_active=True).first()
    if user is None or not user.has_perm(pages.VIEWER_PERMISSION):
        return ""
    return render_to_string("sidewisp/_my_waits.html", {"my_waits": my_waits(user), "oob": True})


def _asks_for_title_count(raw: bytes) -> bool:
    text = raw.decode("latin-1") if isinstance(raw, bytes) else str(raw)
    return "title=1" in text.split("&")
