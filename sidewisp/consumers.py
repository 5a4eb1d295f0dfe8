"""The live pages' WebSocket: htmx out-of-band fragments rendered from the database.

connect = check the user → join the health group → accept → send a snapshot of
what the page shows. Events carry ids only; they are collected for a short
while and the page's fragments are rendered once from the database, so a busy
run cannot flood a browser and a dropped event is repaired by the next render,
by the page asking to resync when it sees a gap in a run's sequence, by the
periodic snapshot, or by the snapshot sent on every reconnect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import defaultdict

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth import get_user_model
from django.db import DatabaseError

from receipts.broadcast import HEALTH_GROUP
from sidewisp import health, pages

logger = logging.getLogger(__name__)

COALESCE_SECONDS = 0.25
# This often the socket re-checks the user and whether the database changed
# since its last render (one cheap query); if so the page gets a snapshot.
# Events published while Redis was down are lost for good: this repairs them.
RESYNC_SECONDS = 5.0
MAX_RESYNCS_PER_MINUTE = 30
MAX_INBOUND_FRAME = 64  # {"type": "resync"} with room for whitespace
# This often the socket looks at the system banner's facts (cached; a stopped worker shows within 10 s).
SYSTEM_SECONDS = 2.0


class HealthConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        self.scope_page = pages.PageScope.from_query_string(self.scope.get("query_string", b""))
        self.pending: dict[int, list[int]] = defaultdict(list)
        self.flush_task: asyncio.Task | None = None
        self.ticker: asyncio.Task | None = None
        self.resyncs: list[float] = []
        self.rendered: tuple | None = None  # the change marker at the last render
        if self.scope_page is None or not await _may_view(self.scope.get("user"), self.scope.get("session")):
            await self.close()
            return
        await self.channel_layer.group_add(HEALTH_GROUP, self.channel_name)
        self.joined = True
        await self.accept()
        await self._send_render(snapshot=True)
        self.ticker = asyncio.create_task(self._tick())
        self.system_watch = asyncio.create_task(self._watch_system())

    async def disconnect(self, code: int) -> None:
        for task in (self.flush_task, self.ticker, getattr(self, "system_watch", None)):
            if task is not None:
                task.cancel()
        if getattr(self, "joined", False):
            await self.channel_layer.group_discard(HEALTH_GROUP, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # The only message a page sends: {"type": "resync"} after it saw a gap. Anything else,
        # including a frame too long to be that message (deep nesting), is ignored unparsed.
        if not text_data or len(text_data) > MAX_INBOUND_FRAME:
            return
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            if json.loads(text_data).get("type") == "resync" and self._resync_allowed():
                await self._send_render(snapshot=True)

    async def health_event(self, message: dict) -> None:
        event = message.get("event") or {}
        if not self.scope_page.is_affected_by(event):
            return
        if isinstance(event.get("run"), int) and isinstance(event.get("seq"), int):
            self.pending[event["run"]].append(event["seq"])
        if self.flush_task is None:
            self.flush_task = asyncio.create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(COALESCE_SECONDS)
        seqs, self.pending = self.pending, defaultdict(list)
        self.flush_task = None
        try:
            await self._send_render(snapshot=False, seqs=list(seqs.items()))
        except DatabaseError:
            # The page stays as it was; the next event, resync or snapshot repairs it.
            logger.warning("live fragment not rendered", exc_info=True)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            if not await _may_view(self.scope.get("user"), self.scope.get("session")):
                await self.close()  # logged out, deactivated or no longer a viewer
                return
            if await database_sync_to_async(pages.change_marker)(self.scope_page) != self.rendered:
                await self._send_render(snapshot=True)

    async def _watch_system(self) -> None:
        # The system banner (workers, beat) is pushed when it changes: a cached ping, no database query.
        # The page rendered it on load, so the first look only sets what it shows.
        shown = await sync_to_async(health.banner, thread_sensitive=False)()
        while True:
            await asyncio.sleep(SYSTEM_SECONDS)
            system = await sync_to_async(health.banner, thread_sensitive=False)()
            if system != shown:
                await self.send(text_data=health.render_banner_oob(system))
                shown = system

    async def _send_render(self, *, snapshot: bool, seqs: list | None = None) -> None:
        self.rendered, html = await _render(self.scope_page, self.scope["user"].pk, seqs or [], snapshot=snapshot)
        if html:
            await self.send(text_data=html)

    def _resync_allowed(self) -> bool:
        now = asyncio.get_running_loop().time()
        self.resyncs = [t for t in self.resyncs if now - t < 60] + [now]
        return len(self.resyncs) <= MAX_RESYNCS_PER_MINUTE


@database_sync_to_async
def _render(scope: pages.PageScope, user_id: int, seqs: list, *, snapshot: bool) -> tuple[tuple, str]:
    # The marker is read first: a change during the render shows at the next tick.
    marker = pages.change_marker(scope)
    # A fresh user: the fragments offer what the role permits now (permissions are cached per object).
    user = get_user_model()._default_manager.filter(pk=user_id, is_active=True).first()
    return marker, pages.render_oob(scope, user, seqs, snapshot=snapshot) if user is not None else ""


@database_sync_to_async
def _may_view(user, session=None) -> bool:
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    if session is not None and session.session_key and not session.exists(session.session_key):
        return False  # logged out since the socket opened
    # A fresh copy: permissions are cached on the user object for the socket's lifetime.
    fresh = get_user_model()._default_manager.filter(pk=user.pk, is_active=True).first()
    return fresh is not None and fresh.has_perm(pages.VIEWER_PERMISSION)
