"""Liveness of the three things Sidewisp cannot work without, and of beat, which it can for a while.

Workers are never pinged on a page's request: beat's `record_worker_status` task (every 2 s, schedule
"worker-status" in settings, run by a worker) pings them and stores who answered and when; pages, the
socket's banner and the System page read that status with its age. A status older than
WORKER_STALE_AFTER_SECONDS is not believed. /healthz reads it fail-closed: stale while beat's heartbeat
is fresh means beat sends the task and no worker runs it, so the worker check fails; only while beat is
silent too (the status cannot be fresh then) does /healthz ask the workers itself.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
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
    """A worker is alive when it answers a broadcast ping within the timeout (asked now: see `worker_check`)."""
    found = _ping(limit=1)
    if "error" in found:
        return {"ok": False, "detail": found["error"]}
    if not found["workers"]:
        return {"ok": False, "detail": "no worker answered"}
    return {"ok": True, "detail": f"{len(found['workers'])} answering"}


# Without these nothing is served or run; without beat (deadline sweeps, re-sends) Sidewisp works, late.
REQUIRED = ("database", "redis", "worker")
OK, DEGRADED, DOWN = "ok", "degraded", "down"


def overall() -> dict[str, Check]:
    """The four checks /healthz answers with (a worker ping only while beat is silent: `worker_check`)."""
    return {"database": check_database(), "redis": check_redis(), "worker": worker_check(), "beat": check_beat()}


def shown() -> dict[str, Check]:
    """The four checks as the System page shows them: the stored worker status, never a ping."""
    return {"database": check_database(), "redis": check_redis(), "worker": worker_status(), "beat": check_beat()}


def status(checks: dict[str, Check]) -> str:
    """down when a required check fails; degraded when only another (beat) does; ok otherwise."""
    if not all(checks[name]["ok"] for name in REQUIRED if name in checks):
        return DOWN
    return OK if all(check["ok"] for check in checks.values()) else DEGRADED


# --- the system banner: facts every page shows, cheap enough for every request -------------

# Beat asks a worker to ping the workers every 2 s (settings.CELERY_BEAT_SCHEDULE "worker-status"); a status
# older than this is not believed.
WORKER_STALE_AFTER_SECONDS = 7.0
# Between full pings (which wait the whole timeout for workers not yet known) the ping stops at the number
# of workers that answered last: a healthy status costs the worker milliseconds, not the timeout.
WORKER_REDISCOVER_SECONDS = 30.0
# Beat records a heartbeat every BEAT_HEARTBEAT_SECONDS (receipts.tasks.beat_heartbeat); after this
# long without one, beat (or every worker that would run its task) has stopped.
BEAT_SILENT_AFTER_SECONDS = 7.0


class Banner(TypedDict):
    ok: bool
    problems: list[str]


def record_worker_status(me: str = "", now: float | None = None) -> dict:
    """Ping the workers and store who answered and when (beat's task runs this in a worker, `me`)."""
    now = time.time() if now is None else now
    previous = _stored_status() or {}
    full = now - previous.get("full_at", 0) >= WORKER_REDISCOVER_SECONDS
    limit = None if full or not previous.get("workers") else len(previous["workers"])
    found = _ping(limit)
    workers = sorted(set(found.get("workers", [])) | ({me} if me else set()))
    status = {"workers": workers, "at": now, "full_at": now if full else previous.get("full_at", now)}
    if found.get("error") and not workers:
        status["error"] = found["error"]
    cache.set(_worker_key(), status, 3600)
    return status


def _ping(limit: int | None) -> dict:
    """{"workers": names} of the workers that answered (up to `limit`), or {"error": class name}.

    The ping goes over a connection of its own that tries the broker once: with the broker down it fails at
    once (kombu would otherwise retry), and a connection broken by a Redis restart is never reused from a pool.
    """
    timeout = settings.SIDEWISP_WORKER_PING_TIMEOUT
    try:
        with celery_app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)
            replies = celery_app.control.ping(timeout=timeout, limit=limit, connection=conn)
    except (OSError, redis.RedisError, KombuError) as exc:
        return {"error": type(exc).__name__}
    return {"workers": [name for reply in replies for name in reply]}


def _stored_status() -> dict | None:
    found = cache.get(_worker_key())
    return found if isinstance(found, dict) and {"workers", "at"} <= found.keys() else None


def worker_status(now: float | None = None) -> Check:
    """The workers as beat's status task last found them, with its age; stale past WORKER_STALE_AFTER_SECONDS."""
    try:
        found = _stored_status()
    except redis.RedisError as exc:
        return {"ok": False, "detail": type(exc).__name__}
    if found is None:
        return {"ok": False, "detail": "no worker status recorded"}
    age = max((time.time() if now is None else now) - float(found["at"]), 0.0)
    if age > WORKER_STALE_AFTER_SECONDS:
        return {"ok": False, "detail": f"no worker status for {age:.0f} s"}
    count = len(found["workers"])
    if not count:
        return {"ok": False, "detail": f"no worker answered {age:.0f} s ago ({found.get('error', 'none')})"}
    return {"ok": True, "detail": f"{count} answered {age:.0f} s ago"}


def worker_check(now: float | None = None) -> Check:
    """/healthz's worker check: the stored status, fail-closed; a ping of its own only while beat is silent."""
    found = worker_status(now)
    # Stale while beat is alive: beat sends the status task and no worker runs it, so no worker is working.
    if found["ok"] or check_beat(now)["ok"]:
        return found
    return check_workers()  # beat is silent too: its status cannot be fresh, so ask the workers now


# sidewisp.ops.metrics reads the workers through this name.
cached_worker_check = worker_check


def _worker_key() -> str:
    return f"system:workers:{settings.CELERY_TASK_DEFAULT_QUEUE}"


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
    """What the banner at the top of every page says: empty when workers and beat are alive. No ping."""
    problems = []
    beat = check_beat()
    if not worker_status()["ok"]:
        if beat["ok"]:
            problems.append(f"No Celery worker is answering ({_last_seen()}): runs are not started or resumed.")
        else:
            problems.append(
                f"No Celery worker is answering as far as Sidewisp knows ({_last_seen()}; beat, which asks the "
                "workers, is not running): runs may not be started or resumed."
            )
    if not beat["ok"]:
        problems.append(
            f"The scheduler (Celery beat) is not running ({beat['detail']}): deadlines and sweeps are not applied."
        )
    return {"ok": not problems, "problems": problems}


def _last_seen() -> str:
    # A time, not an age: the banner's words stay the same while nothing changes (the socket pushes changes).
    try:
        found = _stored_status()
    except redis.RedisError as exc:
        return type(exc).__name__
    if not found or not found.get("workers"):
        return "no worker status recorded" if not found else "none answered"
    return f"last status {datetime.fromtimestamp(float(found['at']), UTC):%H:%M:%S} UTC"


def render_banner_oob(system: Banner) -> str:
    """The banner and the header's system marker as htmx out-of-band swaps (the socket pushes them)."""
    from django.template.loader import render_to_string

    context = {"system": system, "oob": True}
    return render_to_string("sidewisp/_system_banner.html", context) + render_to_string(
        "sidewisp/_system_marker.html", context
    )
