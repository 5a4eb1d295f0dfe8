"""Liveness of the three things Sidewisp cannot work without, and of beat, which it can for a while."""

from __future__ import annotations

import contextlib
import time
from typing import TypedDict

import redis
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, connection
from kombu.exceptions import KombuError

from receipts.tasks import beat_heartbeat_key
from sidewisp.celery import app as celery_app


class Check(TypedDict):
    ok: bool
    detail: str


def check_database() -> Check:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return {"ok": False, "detail": type(exc).__name__}
    return {"ok": True, "detail": connection.vendor}


def check_redis() -> Check:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        return {"ok": False, "detail": type(exc).__name__}
    finally:
        client.close()
    return {"ok": True, "detail": "pong"}


def check_workers() -> Check:
    """A worker is alive when it answers a broadcast ping within the timeout.

    The ping goes over a connection of its own that tries the broker once: with
    the broker down it fails at once (kombu would otherwise retry), and a
    connection broken by a Redis restart is never reused from a pool.
    """
    timeout = settings.SIDEWISP_WORKER_PING_TIMEOUT
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)
            replies = celery_app.control.ping(timeout=timeout, limit=1, connection=conn)
    except (OSError, redis.RedisError, KombuError) as exc:
        return {"ok": False, "detail": type(exc).__name__}
    if not replies:
        return {"ok": False, "detail": "no worker answered"}
    return {"ok": True, "detail": f"{len(replies)} answering"}


# Without these nothing is served or run; without beat (deadline sweeps, re-sends) Sidewisp works, late.
REQUIRED = ("database", "redis", "worker")
OK, DEGRADED, DOWN = "ok", "degraded", "down"


def overall() -> dict[str, Check]:
    return {"database": check_database(), "redis": check_redis(), "worker": check_workers(), "beat": check_beat()}


def status(checks: dict[str, Check]) -> str:
    """down when a required check fails; degraded when only another (beat) does; ok otherwise."""
    if not all(checks[name]["ok"] for name in REQUIRED if name in checks):
        return DOWN
    return OK if all(check["ok"] for check in checks.values()) else DEGRADED


# --- the system banner: facts every page shows, cheap enough for every request -------------

# A worker ping costs up to the ping timeout: pages share one answer for this long.
WORKER_CACHE_SECONDS = 3.0
# Beat records a heartbeat every BEAT_HEARTBEAT_SECONDS (receipts.tasks.beat_heartbeat); after this
# long without one, beat (or every worker that would run its task) has stopped.
BEAT_SILENT_AFTER_SECONDS = 7.0


class Banner(TypedDict):
    ok: bool
    problems: list[str]


def cached_worker_check() -> Check:
    """`check_workers`, asked at most once per WORKER_CACHE_SECONDS across every process (the cache)."""
    try:
        found = cache.get(_worker_key())
    except redis.RedisError as exc:
        return {"ok": False, "detail": type(exc).__name__}
    if found is None:
        found = check_workers()
        with contextlib.suppress(redis.RedisError):
            cache.set(_worker_key(), found, WORKER_CACHE_SECONDS)
    return found


def _worker_key() -> str:
    return f"system:worker:{settings.CELERY_TASK_DEFAULT_QUEUE}"


def check_beat(now: float | None = None) -> Check:
    try:
        beat = cache.get(beat_heartbeat_key())
    except redis.RedisError as exc:
        return {"ok": False, "detail": type(exc).__name__}
    if beat is None:
        return {"ok": False, "detail": "no heartbeat recorded"}
    silent = (now or time.time()) - float(beat)
    if silent > BEAT_SILENT_AFTER_SECONDS:
        return {"ok": False, "detail": f"silent for {silent:.0f} s"}
    return {"ok": True, "detail": f"heartbeat {max(silent, 0):.0f} s ago"}


def banner() -> Banner:
    """What the banner at the top of every page says: empty when workers and beat are alive."""
    problems = []
    worker = cached_worker_check()
    if not worker["ok"]:
        problems.append(f"No Celery worker is answering ({worker['detail']}): runs are not started or resumed.")
    beat = check_beat()
    if not beat["ok"]:
        problems.append(
            f"The scheduler (Celery beat) is not running ({beat['detail']}): deadlines and sweeps are not applied."
        )
    return {"ok": not problems, "problems": problems}


def render_banner_oob(system: Banner) -> str:
    """The banner and the header's system marker as htmx out-of-band swaps (the socket pushes them)."""
    from django.template.loader import render_to_string

    context = {"system": system, "oob": True}
    return render_to_string("sidewisp/_system_banner.html", context) + render_to_string(
        "sidewisp/_system_marker.html", context
    )
