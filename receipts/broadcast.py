"""The one module that sends health events from workers to browsers.

Events are minimized (ids, codes, times, a per-run sequence) and best effort:
the channel layer may drop them, and the pages resync from the database on
every (re)connect. Publishing therefore never raises into the caller.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Literal, NotRequired, TypedDict

from asgiref.sync import async_to_sync
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
    health: NotRequired[str]  # receipts.health's level, when the run's health is known
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
    """Send one event to every open page; False (and a log line) when it could not."""
    try:
        async_to_sync(_send)(event)
    except Exception as exc:  # noqa: BLE001 - best effort by design: never fail the recording
        logger.warning("health event not published: %s", type(exc).__name__)
        return False
    return True


async def _send(event: HealthEvent) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "health.event", "event": dict(event)}
    await asyncio.wait_for(layer.group_send(HEALTH_GROUP, message), PUBLISH_TIMEOUT_SECONDS)
