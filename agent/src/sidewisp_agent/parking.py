"""Which runs an operator stopped, as this process knows it: the observer's per-step check reads memory.

An operator's "stop auto-continue" is a flag of the run (the server's `Run.auto_continue`), written by the web
process and read through the store (`store.Store.auto_continue`, `stopped`). The observer checks it before every
root step; reading the store there would cost the agent a query per step, so this process keeps what it last
read of each run it is driving:

- `observe` reads the run's row when it starts (the database is the truth on every start and resume);
- the evidence writer reads the flags of the runs in each batch it wrote, on its own thread, after the
  batch committed (so a stop made by anything reacting to a stored receipt is known before the writer
  says the receipt is stored);
- a run's flag older than `MAX_AGE_SECONDS` is read again by the check itself: a run whose steps leave no
  receipts still sees a stop within about a second, at one indexed query a second at most.

Only runs being observed in this process are remembered (`watching`), and forgotten when `observe` ends.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from . import store

MAX_AGE_SECONDS = 1.0

_lock = threading.Lock()
_watched: dict[str, int] = {}  # operation id -> how many observers in this process drive it
_known: dict[str, tuple[bool, float]] = {}  # operation id -> (stopped, monotonic time it was read)


@contextmanager
def watching(operation_id: str) -> Iterator[None]:
    """Remember the run's flag while an observer in this process drives it."""
    with _lock:
        _watched[operation_id] = _watched.get(operation_id, 0) + 1
    try:
        yield
    finally:
        with _lock:
            left = _watched.pop(operation_id, 1) - 1
            if left > 0:
                _watched[operation_id] = left
            else:
                _known.pop(operation_id, None)


def stopped(operation_id: str) -> bool | None:
    """Whether an operator stopped the run, from memory; None when not known or older than `MAX_AGE_SECONDS`."""
    with _lock:
        found = _known.get(operation_id)
    if found is None or time.monotonic() - found[1] > MAX_AGE_SECONDS:
        return None
    return found[0]


def read(operation_id: str) -> bool:
    """Read the run's flag from the store (one indexed query) and remember it; True when stopped."""
    read_at = time.monotonic()
    is_stopped = store.current().auto_continue(operation_id) is False
    learn({operation_id: is_stopped}, read_at)
    return is_stopped


def watched(operation_ids: Iterable[str]) -> set[str]:
    """The runs among `operation_ids` an observer in this process drives."""
    with _lock:
        return {op for op in operation_ids if op in _watched}


def refresh(operation_ids: Iterable[str]) -> None:
    """Read the flags of the watched runs among `operation_ids` in one query (the writer, after a batch)."""
    wanted = watched(operation_ids)
    if not wanted:
        return
    read_at = time.monotonic()
    stopped_ones = store.current().stopped(wanted)
    learn({op: op in stopped_ones for op in wanted}, read_at)


def learn(flags: dict[str, bool], read_at: float) -> None:
    """Remember flags read at `read_at` (monotonic) for the watched runs; an older read never wins."""
    with _lock:
        for op, is_stopped in flags.items():
            if op in _watched and read_at >= _known.get(op, (False, float("-inf")))[1]:
                _known[op] = (is_stopped, read_at)


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    _watched.clear()
    _known.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
