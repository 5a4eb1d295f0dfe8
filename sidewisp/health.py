"""Liveness of the three things Sidewisp cannot work without."""

from __future__ import annotations

from typing import TypedDict

import redis
from django.conf import settings
from kombu.exceptions import KombuError
from django.db import DatabaseError, connection

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


def overall() -> dict[str, Check]:
    return {"database": check_database(), "redis": check_redis(), "worker": check_workers()}
