"""Shared helpers that turn what the graph did into receipts and reports.

Everything written here is a name, an id, a count or a digest: callers pass
nothing else, and nothing here logs message content. Receipts go to the
batched writer (`sidewisp_agent.writer`) as `sidewisp_agent.entries`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import ParamSpec, TypeVar

from . import bundle, writer
from .bundle import BundleError
from .entries import OBSERVER, PartEntry, ReportEntry, RunNotOwned, digest
from .store import hooks

P = ParamSpec("P")
R = TypeVar("R")
logger = logging.getLogger(__name__)


def run_orm(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Call `fn` (which reads the store, or runs the user's verifier) from sync code, even on a thread that runs
    an event loop.

    A database refuses sync calls on such a thread (Django: SynchronousOnlyOperation), so there the call runs in
    a short-lived worker thread, which closes what it opened (`store.hooks.thread_ended`). Elsewhere it is a
    plain call.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sidewisp-orm") as pool:
        return pool.submit(_in_a_worker, fn, *args, **kwargs).result()


async def arun_orm(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`run_orm` for async code: a worker thread that closes what it opened."""
    return await asyncio.to_thread(_in_a_worker, fn, *args, **kwargs)


def _in_a_worker(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    try:
        return fn(*args, **kwargs)
    finally:
        hooks.thread_ended()


def guarded(operation_id: str, part: str, call: Callable[[], R], *, agent: str = OBSERVER) -> R | None:
    """Run one recording call so that observation never breaks the observed graph.

    Evidence that does not validate is left absent (its boundary then fails, which
    is the truth) and becomes an `evidence_dropped` report naming the part and the
    field; any other failure is logged by class name and swallowed.
    """
    try:
        return call()
    except RunNotOwned:
        pass  # another side's run (issue 19): recording logged the refusal, and a report could not go there
    except BundleError as exc:
        _swallowing(writer.submit, writer.dropped_report(operation_id, part, exc.field, agent=agent))
    except Exception as exc:  # noqa: BLE001 - recording must never raise into the user's graph
        logger.warning("%s receipt not recorded: %s", part, type(exc).__name__)
    return None


def _swallowing(fn: Callable[..., object], *args: object) -> None:
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - reporting a dropped receipt must not raise either
        logger.warning("evidence_dropped report not recorded: %s", type(exc).__name__)


def handoff_id_for(operation_id: str, tool_call_id: str) -> str:
    """Deterministic: a re-run of the same operation records into the same handoff."""
    return f"h-{digest(operation_id, tool_call_id)}"


def operation_id_of(config: dict | None) -> str | None:
    """The run's operation id (its thread id when it names none), as stored: any id is one (a UUID object,
    a git SHA, `user42_Session2024_10_05_CheckoutFlow`); a credential-shaped one is `redacted` here, so
    every lookup of the run on this side finds the row its receipts made (spec v1.3)."""
    configurable = (config or {}).get("configurable", {})
    found = configurable.get("operation_id") or configurable.get("thread_id")
    return None if found is None else bundle.identifier(str(found))


def submit_outcome(operation_id: str, part: str, value: object, attempt: str) -> None:
    """Hand a run outcome (wait, verification, final_status) to the writer, for the run's latest handoff.

    The writer attaches it to the latest handoff when it writes it, and stores
    nothing when the run has none (receipts.ingest.intake).
    """
    writer.submit(PartEntry(operation_id, None, part, value, attempt))


def submit_part(operation_id: str, handoff_id: str, part: str, value: object, attempt: str = "1") -> None:
    writer.submit(PartEntry(operation_id, handoff_id, part, value, attempt))


def submit_report(operation_id: str, agent: str, kind: str, detail: dict, attempt: str) -> None:
    writer.submit(ReportEntry(operation_id, agent, kind, detail, attempt))


def now_iso() -> str:
    return datetime.now(UTC).isoformat()
