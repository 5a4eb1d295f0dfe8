"""`observe` and `aobserve` for the tests that read what a run stored: the writer has stored it when they return.

An observed run returns before its receipts are stored (issue 32): only a waiting run, or one observed with
`durable=True`, waits for them. These tests read the database right after the run, so they wait for the writer
as it returns (what an operator's page shows a moment later), without making every run durable. The tests of
the return itself (tests/agents/test_observe_returns.py) call the observer's own functions.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sidewisp_agent import observer, writer


def observe(*args: Any, **kwargs: Any) -> observer.Outcome:
    """`observe`, then the writer's flush (also when the run raised)."""
    try:
        return observer.observe(*args, **kwargs)
    finally:
        assert writer.flush(), "the run's evidence was not stored"


async def aobserve(*args: Any, **kwargs: Any) -> observer.Outcome:
    """`aobserve`, then the writer's flush off the event loop (also when the run raised)."""
    try:
        return await observer.aobserve(*args, **kwargs)
    finally:
        assert await asyncio.to_thread(writer.flush), "the run's evidence was not stored"


observe.stream = observer.observe_stream  # type: ignore[attr-defined] - a test of a stream flushes when it reads
aobserve.astream = observer.aobserve_stream  # type: ignore[attr-defined]
aobserve.astream_events = observer.aobserve_events  # type: ignore[attr-defined]
