"""Which side is recording, and whose runs it may write: a run is its creator's (issue 19)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from sidewisp_agent.entries import RunNotOwned  # noqa: F401 - raised by the sides' guards; read as sides.X

from receipts.models import Run

# Which app is recording: "" a local app (the evidence writer's LocalSink), a source's name (the receipts
# API); None, the default, is the server itself (operator actions, sweeps), which writes any run.
_side: contextvars.ContextVar[str | None] = contextvars.ContextVar("sidewisp_recording_side", default=None)


@contextlib.contextmanager
def writing_as(source_name: str) -> Iterator[None]:
    """Record as a local app ("") or as the remote source `source_name`: only that side's runs accept it."""
    reset = _side.set(source_name)
    try:
        yield
    finally:
        _side.reset(reset)


def current_side() -> str | None:
    """The side recording now: "" a local app, a source's name, None the server itself."""
    return _side.get()


def namespace() -> str:
    """The namespace the current side's operation ids live in (issue 29 §4): a source's name, "" for local apps
    (and the server itself, whose by-id lookups are of local runs: it acts on a remote run `writing_as` its source).
    A side never finds another side's run by an operation id, so it can neither block nor probe one."""
    return _side.get() or ""


def owner_problem(run: Run, side: str | None = None, *, act: str = "record into it") -> str:
    """Why `side` (default: the current one) may not `act` on `run` ("" when it may): a run is its creator's.

    Every by-id lookup is in the side's own namespace, so this is a second guard: were it ever reached, it
    names the run and the side refused, never which source holds the run (issue 29 §3: no oracle, no owner)."""
    side = _side.get() if side is None else side
    if side is None or run.source_name == side:
        return ""
    writer = f"source {side}" if side else "a local app"
    return f"run {run.operation_id} is another side's; {writer} may not {act}"
