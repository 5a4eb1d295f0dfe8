"""A transfer's `created` is stored before its run's checkpoint can move past it, without a flush per transfer.

A worker killed after LangGraph saved the step that applied a transfer, but before the evidence writer
stored the transfer's `created`, would leave the resumed run to re-derive `created` from the checkpoint
history (`sidewisp_agent.reconcile`) without what only the middleware knew (its route version, its attempt).
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
from typing import Any

from . import writer

logger = logging.getLogger(__name__)

GUARDED = "_sidewisp_guarded"  # true on a saver class whose saves wait here

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
    """Make `saver`'s saves wait for held transfers; False when it cannot be guarded (the middleware flushes then).

    The saver becomes an instance of a subclass of its own class whose saves call `release` first, so a
    clone LangGraph makes of it (`copy.copy` with another serializer) saves through its own methods, guarded.
    """
    if saver is None:
        return False
    if getattr(saver, GUARDED, False):
        return True
    try:
        saver.__class__ = _guarded_class(type(saver))
    except TypeError:  # a class whose layout cannot change (slots, extension types)
        return False
    return True


_guarded_classes: dict[type, type] = {}


def _guarded_class(cls: type) -> type:
    with _lock:
        found = _guarded_classes.get(cls)
        if found is None:
            found = _guarded_classes[cls] = type(f"Guarded{cls.__name__}", (cls,), _guarded_methods(cls))
        return found


def _guarded_methods(cls: type) -> dict[str, Any]:
    def put(self: Any, *args: Any, **kwargs: Any) -> Any:
        release(_thread_of(args, kwargs))
        return cls.put(self, *args, **kwargs)

    def put_writes(self: Any, *args: Any, **kwargs: Any) -> Any:
        release(_thread_of(args, kwargs))
        return cls.put_writes(self, *args, **kwargs)

    async def aput(self: Any, *args: Any, **kwargs: Any) -> Any:
        await _arelease(_thread_of(args, kwargs))
        return await cls.aput(self, *args, **kwargs)

    async def aput_writes(self: Any, *args: Any, **kwargs: Any) -> Any:
        await _arelease(_thread_of(args, kwargs))
        return await cls.aput_writes(self, *args, **kwargs)

    return {"put": put, "put_writes": put_writes, "aput": aput, "aput_writes": aput_writes, GUARDED: True}


async def _arelease(thread_id: str | None) -> None:
    if held(thread_id):
        await asyncio.to_thread(release, thread_id)  # off the event loop


def _thread_of(args: tuple, kwargs: dict) -> str | None:
    config = kwargs.get("config", args[0] if args else None)
    configurable = (config or {}).get("configurable") if isinstance(config, dict) else None
    thread_id = (configurable or {}).get("thread_id")
    return str(thread_id) if thread_id is not None else None


def _forget_after_fork() -> None:
    global _lock
    _lock = threading.Lock()
    _held.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
