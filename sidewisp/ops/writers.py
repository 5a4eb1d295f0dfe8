"""The evidence writers' state, gathered from every process through Redis (issue 32: /metrics and the System page).

Each process keeps its evidence writer's counts in memory (`agents.observe.writer.stats()`). After each Celery
task a worker process reports them (`push_writer_counts`, a `task_postrun` receiver):

- the growth of the counters /metrics sums over every process (`WRITER_COUNTS`), kept across restarts;
- its own state, as it is at that moment: entries queued, stored and dropped since the process started, under
  its process label (host and pid). `processes()` reads them, with the reading process's own state, live; a
  process not heard from for `FRESH_SECONDS` is no longer shown (its entry is removed).

A hosted run's task waits for its writer before it ends, so a worker process's `queued` is what arrived after.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from typing import TypedDict

import redis
from django.conf import settings

from agents.observe import writer

# The evidence writer's counters that /metrics shows, summed over worker processes.
WRITER_COUNTS = {
    "blocked": "Receipts an agent had to wait to hand over: its worker's evidence buffer was full.",
    "dropped": "Receipts given up on by a worker's evidence writer (each one logged).",
    "failed": "Batches a worker's evidence writer could not write at first try (retried).",
}
# A process that has not reported for this long (it ended, or ran no task) is not shown.
FRESH_SECONDS = 3600
_REDIS_TIMEOUT_SECONDS = 0.2


class ProcessState(TypedDict):
    process: str  # host:pid
    queued: int
    stored: int
    dropped: int
    age: float  # seconds since the process reported it


def writer_count_key(name: str) -> str:
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}:metrics:evidence_writer_{name}"


def processes_key() -> str:
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}:metrics:evidence_writer_processes"


def process_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _client() -> redis.Redis:
    timeout = _REDIS_TIMEOUT_SECONDS
    return redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=timeout, socket_timeout=timeout)


def _own_state(now: float) -> str:
    counts = writer.stats()
    state = {"queued": counts["queued"], "stored": counts["written"], "dropped": counts["dropped"], "at": now}
    return json.dumps(state)


# What this process last added to Redis, per counter (a forked child starts from its parent's values: the
# comparison below sees its own writer's counts start again from zero).
_pushed_writer_counts: dict[str, int] = {}
_push_lock = threading.Lock()


def push_writer_counts(**kwargs) -> None:
    """Celery `task_postrun` receiver: add what this process's writer counted since the last push, and report
    its state under its process label."""
    with _push_lock:  # tasks of a threads pool end at once
        counts = writer.stats()
        growth = {}
        for name in WRITER_COUNTS:
            pushed = _pushed_writer_counts.get(name, 0)
            # Fewer than pushed: a new writer (a forked child, a restarted one) counts from zero again.
            growth[name] = counts[name] - pushed if counts[name] >= pushed else counts[name]
        with contextlib.suppress(redis.RedisError), _client() as client:
            pipe = client.pipeline(transaction=False)
            for name, n in growth.items():
                if n:
                    pipe.incrby(writer_count_key(name), n)
            pipe.hset(processes_key(), process_label(), _own_state(time.time()))
            pipe.execute()
            _pushed_writer_counts.update({name: counts[name] for name in WRITER_COUNTS})


def processes() -> list[ProcessState]:
    """Every process's writer as it last reported it (this process's live, when it has written anything),
    by label; a stale process's entry is removed. Raises `redis.RedisError` when Redis cannot be read."""
    now = time.time()
    own = process_label()
    with _client() as client:
        reported = client.hgetall(processes_key())
        states = {field.decode(): json.loads(raw) for field, raw in reported.items()}
        if writer.stats()["submitted"] or own in states:
            states[own] = json.loads(_own_state(now))
        stale = [label for label, state in states.items() if now - float(state["at"]) > FRESH_SECONDS]
        if stale:
            client.hdel(processes_key(), *stale)
    return [
        ProcessState(
            process=label,
            queued=int(state["queued"]),
            stored=int(state["stored"]),
            dropped=int(state["dropped"]),
            age=max(now - float(state["at"]), 0.0),
        )
        for label, state in sorted(states.items())
        if label not in stale
    ]


def shown() -> list[ProcessState] | None:
    """`processes()` for the System page; None when Redis cannot be read (the page says so)."""
    try:
        return processes()
    except redis.RedisError:
        return None
