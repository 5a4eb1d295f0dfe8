"""A transfer's `created` is stored before its run's checkpoint can move past it, without a flush per transfer.

A worker killed after LangGraph saved the step that applied a transfer, but before the evidence writer
stored the transfer's `created`, would leave the resumed run to re-derive `created` from the checkpoint
history (`agents.reconcile`) without what only the middleware knew (its route version, its attempt).
So the middleware `hold`s the run's thread at the writer's current mark when it recorded a transfer, and
the run's checkpointer, `guard`ed by the observer, waits for the writer to reach that mark before it
saves anything of that thread (`put`, `put_writes` and their async twins). A checkpoint that follows no
transfer waits for nothing; a run without a checkpointer has nothing to move past, so nothing waits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from functools import wraps
from typing import Any

from agents import writer

logger = logging.getLogger(__name__)

GUARDED = "_sidewisp_guarded"  # set on a saver whose methods wait here
_SAVES = ("put", "put_writes")

_lock = threading.Lock()
_held: dict[str, int] = {}  # thread id -> the writer's mark right after its latest transfer's `created`


def hold(thread_id: str) -> None:
    """The thread's checkpoints wait until everything submitted so far (its transfer) is stored."""
    mark = writer.get().mark()
    with _lock:
        _held[thread_id] = mark


def held(thread_id: str | None) -> bool:
    with _lock:
        return thread_id in _held


def release(thread_id: str | None) -> None:
    """Wait until the thread's held transfer is stored (at most the writer's flush timeout), then forget it."""
    with _lock:
        mark = _held.get(thread_id) if thread_id is not None else None
    if mark is None:
        return
    if not writer.get().wait_for(mark):
        logger.warning("a transfer's receipts were not stored before its checkpoint: %s", writer.stats())
    with _lock:
        if _held.get(thread_id) == mark:
            del _held[thread_id]


def guard(saver: Any) -> bool:
    """Make `saver`'s saves wait for held transfers (once per saver); False when it cannot be guarded."""
    if saver is None or getattr(saver, GUARDED, False):
        return saver is not None
    try:
        for name in _SAVES:
            setattr(saver, name, _waiting(getattr(saver, name)))
            setattr(saver, f"a{name}", _awaiting(getattr(saver, f"a{name}")))
        setattr(saver, GUARDED, True)
    except (AttributeError, TypeError):  # a saver with slots or read-only methods: the middleware flushes instead
        return False
    return True


def _thread_of(args: tuple, kwargs: dict) -> str | None:
    config = kwargs.get("config", args[0] if args else None)
    configurable = (config or {}).get("configurable") if isinstance(config, dict) else None
    thread_id = (configurable or {}).get("thread_id")
    return str(thread_id) if thread_id is not None else None


def _waiting(save: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(save)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        release(_thread_of(args, kwargs))
        return save(*args, **kwargs)

    return wrapper


def _awaiting(save: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(save)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        thread_id = _thread_of(args, kwargs)
        if held(thread_id):
            await asyncio.to_thread(release, thread_id)  # off the event loop
        return await save(*args, **kwargs)

    return wrapper


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    _held.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
