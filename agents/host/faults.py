"""Fault injection for the crash tests (tests/faults only): this process kills itself at a named receipt boundary.

Off unless `SIDEWISP_FAULT_KILL` is set; never set it in a deployment. Its value is `<when>:<part>:<n>`:

- `when` is `submitted` (the observer or the middleware hands the n-th entry of `part` to the evidence
  writer, `agents.observe.writer.submit`, before anything stores it) or `stored` (right after the writer's batch
  holding the n-th entry of `part` committed, on the writer's thread);
- `part` is a receipt part: `created`, `reduced`, `destination`, `wait`, `verification` or `final_status`;
- `n` counts that part's entries in this process from 1 (a forked child counts anew; reports are not counted).

At that point the process creates the file named by `SIDEWISP_FAULT_ONCE_FILE` and sends itself SIGKILL:
no cleanup, no flush, no ack, as when the kernel kills it. Only the process that creates the file dies, so
the task Celery delivers again runs past the same boundary and the run can end. Without
`SIDEWISP_FAULT_ONCE_FILE` every process that reaches the boundary dies (a task that kills each worker
that takes it). A value that does not parse is logged once and injects nothing.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

logger = logging.getLogger(__name__)

KILL_ENV = "SIDEWISP_FAULT_KILL"
ONCE_FILE_ENV = "SIDEWISP_FAULT_ONCE_FILE"
SUBMITTED, STORED = "submitted", "stored"
PARTS = ("created", "reduced", "destination", "wait", "verification", "final_status")


@dataclass(frozen=True)
class KillPoint:
    """The boundary `SIDEWISP_FAULT_KILL` names: when, which part, and which of its entries (from 1)."""

    when: str
    part: str
    n: int

    def __str__(self) -> str:
        return f"{self.when}:{self.part}:{self.n}"


def parse(value: str) -> KillPoint:
    """The kill point of a `<when>:<part>:<n>` value; ValueError naming what is wrong."""
    fields = value.strip().split(":")
    if len(fields) != 3:
        msg = f"{KILL_ENV} must be <when>:<part>:<n>"
        raise ValueError(msg)
    when, part, count = fields
    if when not in (SUBMITTED, STORED):
        msg = f"{KILL_ENV}: when must be {SUBMITTED} or {STORED}"
        raise ValueError(msg)
    if part not in PARTS:
        msg = f"{KILL_ENV}: part must be one of {', '.join(PARTS)}"
        raise ValueError(msg)
    if not count.isdigit() or int(count) < 1:
        msg = f"{KILL_ENV}: n must be a whole number from 1"
        raise ValueError(msg)
    return KillPoint(when, part, int(count))


def submitted(entry: object) -> None:
    """Called by the writer as `entry` is handed to it (before it is queued or stored)."""
    point = _armed(SUBMITTED)
    if point is not None and getattr(entry, "part", None) == point.part and _reached(point, 1):
        _kill(point)


def stored(entries: Iterable[object]) -> None:
    """Called by the writer right after a batch of `entries` committed."""
    point = _armed(STORED)
    if point is None:
        return
    parts = [getattr(entry, "part", None) for entry in entries]
    count = parts.count(point.part)
    if count and _reached(point, count):
        _kill(point, held=parts)


# --- this process's counts ---------------------------------------------------------

_lock = threading.Lock()
_counts: dict[KillPoint, int] = {}


def _armed(when: str) -> KillPoint | None:
    value = os.environ.get(KILL_ENV)  # the whole cost when the hook is off: one lookup
    if not value:
        return None
    point = _point(value)
    return point if point is not None and point.when == when else None


@cache
def _point(value: str) -> KillPoint | None:
    try:
        return parse(value)
    except ValueError as exc:
        logger.error("fault injection off: %s", exc)
        return None


def _reached(point: KillPoint, count: int) -> bool:
    """Count `count` more entries of the point's part; True when the n-th is among them."""
    with _lock:
        before = _counts.get(point, 0)
        _counts[point] = before + count
    return before < point.n <= before + count


def _kill(point: KillPoint, held: Iterable[object] = ()) -> None:
    """SIGKILL this process; the once file names the point and the parts of the batch it stored (`held=`): a batch
    that also held the run's end leaves nothing to deliver again."""
    once = os.environ.get(ONCE_FILE_ENV)
    if once:
        try:
            # O_EXCL: of two processes reaching the boundary, exactly one creates the file and dies.
            fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return
        held_parts = ",".join(sorted({str(part) for part in held if part}))
        os.write(fd, f"{point} pid={os.getpid()} held={held_parts}\n".encode())
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def _forget_after_fork() -> None:
    global _lock
    _counts.clear()
    _lock = threading.Lock()  # a lock held by a parent's thread at fork would never be released here


os.register_at_fork(after_in_child=_forget_after_fork)
