"""The graph-level observer: drives a parent graph and records what it did.

It streams the parent graph (`updates`, `tasks`, `custom`, `values`,
`checkpoints`, with subgraphs) and records, for each transfer announced by
`SidewispMiddleware` (any library's transfer tool):

- `reduced` once the parent applied the transfer's update: the goto the tool
  really returned; `active_agent_before` = the agent node that ran the
  transfer (the namespace the announcement came from); `active_agent_after` =
  the graph's `active_agent` channel where it has one, else the node the graph
  schedules next (the root checkpoint's `next` with a checkpointer, which also
  sees a destination held by `interrupt_before`; without one, the tasks the
  next step starts); the ids of the update's ToolMessages that answer calls of
  the transferring agent turn; the context key names in the state after it;
- `destination` from the next parent-level `tasks` START of the goto node (the
  only reliable "destination started" signal), with the task id as attempt id;

and, at the end, the run's outcome on its latest handoff (a `wait` per
interrupt, the outcome `verification`, `final_status`) and the run's status.
Receipts and the run's lifecycle (created, running, waiting with its pending
call, parked, ended: `receipts.ingest.intake.RunEntry`, applied by
`receipts.ingest.lifecycle`) go to the batched writer (`sidewisp_agent.writer`) in one FIFO,
so a wait is stored before the run shows as waiting without a flush; nothing
raises into the graph. The agent's side reads the run's stop flag once, as
`observe` starts (`parking` remembers it for the per-step check).
`observe` returns as soon as the graph does: it waits for the writer only
before it returns a waiting outcome, or for every run with `durable=True`
(`sidewisp_agent.writer.settle`). `observe` also works on a thread that runs an
event loop, and `aobserve` is its async twin.

What it reads back of the run goes through the store (`sidewisp_agent.store`): the server's database, or,
for an app elsewhere, the Sidewisp server, whose runs are its own: there the observer sends only entries,
`final_status` included, and finds no run, no stop flag and no parts to reconcile here.

The pieces: `outcomes` (what observe is told and returns), `runs` (the run's lifecycle entries),
`waits` (approval waits and resumes), `failures` (a run that raised), `conclusion` (the end of a
run) and `streams` (the caller's chunks); this module drives the graph.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Mapping
from typing import Any

from langchain_core.runnables import Runnable
from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER
from langgraph.checkpoint.base import BaseCheckpointSaver

from . import barrier, evidence, parking, reconcile, reopening, toolevents, tracking, writer
from .conclusion import asnapshot_of, conclude_run, gated_schemas, snapshot_of
from .failures import Culprit, raised
from .middleware import BARRIER_CHECKPOINTER, BARRIER_KEY, BARRIER_NONE_NEEDED, OBSERVED_KEY
from .outcomes import Ended, Outcome, Policy, Verifier, WaitPolicy
from .runs import Applied, aparked_now, begin, parked_now, required_operation_id
from .streams import AsyncObservedStream, ObservedStream, UserStream
from .tracking import Tracker


def observe(
    graph: Any,
    graph_input: Any,
    config: dict,
    *,
    wait_policies: Mapping[str, WaitPolicy] | None = None,
    verifier: Verifier | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    route_version: str | None = None,
    durable: bool = False,
) -> Outcome:
    """Run `graph` to its end or its next wait, recording receipts and the run's status.

    The Run of `configurable.operation_id` (or the thread id) is created as an
    observed run when it is new. Pass `Command(resume=...)` to resume a wait (the
    wait is marked resolved first). Works on a thread that runs an event loop too.

    What the graph raises reaches the caller as unobserved `invoke` raises it (the
    same exception), after the failure is recorded: the run is failed with the
    exception's class name and a `graph_error` report names the class and where
    it was raised (the node path, the tool), never its message. An error of a
    `retry_on` type means the caller retries from the checkpoint: the run is set
    back to `queued` with the class name (a retry is expected, never left
    `running`); its next `observe` sets it running again. The hosted runner
    passes the transient errors and its task retries them.

    It returns as soon as the graph does; the run's receipts are stored after it, in batches, except
    before a waiting outcome (its wait is stored first) or with `durable=True` (every run is stored first).
    `observe.stream(...)` runs the same way and gives the caller the chunks of
    their own stream modes on the way.
    """
    policy = Policy(wait_policies or {}, verifier, retry_on, route_version, durable)
    return _exhausted(_observed(graph, graph_input, config, policy, UserStream()))


async def aobserve(
    graph: Any,
    graph_input: Any,
    config: dict,
    *,
    wait_policies: Mapping[str, WaitPolicy] | None = None,
    verifier: Verifier | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    route_version: str | None = None,
    durable: bool = False,
) -> Outcome:
    """`observe` on `graph.astream` (async tools and hooks; the ORM in worker threads); `aobserve.astream` streams."""
    ended = Ended()
    policy = Policy(wait_policies or {}, verifier, retry_on, route_version, durable)
    async for _ in _aobserved(graph, graph_input, config, policy, UserStream(), ended):
        pass
    return ended.outcome


def observe_stream(
    graph: Any,
    graph_input: Any,
    config: dict,
    *,
    stream_mode: Any = None,
    subgraphs: bool = False,
    version: str = "v1",
    wait_policies: Mapping[str, WaitPolicy] | None = None,
    verifier: Verifier | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    route_version: str | None = None,
    durable: bool = False,
    **kwargs: Any,
) -> ObservedStream:
    """`observe.stream`: `observe`, giving the caller the chunks `graph.stream(graph_input, config,
    stream_mode=..., subgraphs=..., version=..., **kwargs)` would give, while Sidewisp records as `observe` does.

    Exceptions and `retry_on` as `observe`. With a checkpointer the observer streams with durability "sync".
    """
    policy = Policy(wait_policies or {}, verifier, retry_on, route_version, durable)
    user = UserStream.asked(graph, stream_mode, subgraphs, version, kwargs)
    return ObservedStream(_observed(graph, graph_input, config, policy, user))


def aobserve_stream(
    graph: Any,
    graph_input: Any,
    config: dict,
    *,
    stream_mode: Any = None,
    subgraphs: bool = False,
    version: str = "v1",
    wait_policies: Mapping[str, WaitPolicy] | None = None,
    verifier: Verifier | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    route_version: str | None = None,
    durable: bool = False,
    **kwargs: Any,
) -> AsyncObservedStream:
    """`aobserve.astream`: `observe.stream` on `graph.astream` (`async for chunk in ...`)."""
    policy = Policy(wait_policies or {}, verifier, retry_on, route_version, durable)
    user = UserStream.asked(graph, stream_mode, subgraphs, version, kwargs)
    ended = Ended()
    return AsyncObservedStream(_aobserved(graph, graph_input, config, policy, user, ended), ended)


class _ObservedRunnable(Runnable):
    """A graph as `astream_events` drives it, its `astream` observed (LangChain's event streamer taps it)."""

    def __init__(self, graph: Any, observing: dict[str, Any]) -> None:
        self.graph = graph
        self.observing = observing
        self.ended = Ended()

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        return self.graph.get_name(suffix, name=name)

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
        msg = "an observed graph streams its events with aobserve.astream_events"
        raise TypeError(msg)

    async def astream(self, input: Any, config: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
        chunks = aobserve_stream(self.graph, input, config or {}, **self.observing, **kwargs)
        async for chunk in chunks:
            yield chunk
        self.ended.outcome = chunks.outcome


def aobserve_events(
    graph: Any,
    graph_input: Any,
    config: dict,
    *,
    version: str = "v2",
    wait_policies: Mapping[str, WaitPolicy] | None = None,
    verifier: Verifier | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    route_version: str | None = None,
    durable: bool = False,
    **kwargs: Any,
) -> AsyncObservedStream:
    """`aobserve.astream_events`: the events `graph.astream_events(graph_input, config, version=...)` gives
    ("v1" or "v2"), while Sidewisp records as `observe` does; `outcome` once the run ended."""
    observing = {
        "wait_policies": wait_policies,
        "verifier": verifier,
        "retry_on": retry_on,
        "route_version": route_version,
        "durable": durable,
    }
    runnable = _ObservedRunnable(graph, observing)
    events = runnable.astream_events(graph_input, config, version=version, **kwargs)
    return AsyncObservedStream(events, runnable.ended)


def _observed(
    graph: Any, graph_input: Any, config: dict, policy: Policy, user: UserStream
) -> Generator[Any, None, Outcome]:
    """The one driver of `observe` and `observe.stream`: yields the caller's chunks, returns the Outcome."""
    operation_id = required_operation_id(config)
    with parking.watching(operation_id):
        return (yield from _driven(graph, graph_input, config, policy, user, operation_id))


def _driven(
    graph: Any, graph_input: Any, config: dict, policy: Policy, user: UserStream, operation_id: str
) -> Generator[Any, None, Outcome]:
    start = evidence.run_orm(begin, operation_id, config, graph_input, policy)
    if start.parked:
        return _settled(Outcome("parked"), policy)
    tracker = tracking.tracker_for(graph, operation_id, policy.route_version)
    config = user.configure(toolevents.watched(marked(config, graph, tracker)))
    options = tracking.stream_options(tracker)
    culprit = Culprit()
    try:
        writer.submit_all(reconcile.entries(tracker, graph, config))
        applied = Applied(tracker.checkpointed)
        for ns, mode, chunk in graph.stream(graph_input, config, **user.options(options)):
            if _root_start(ns, mode, chunk):
                applied.stored_before_the_step()
                if parked_now(operation_id):
                    return _settled(Outcome("parked"), policy)
            if (tool_event := toolevents.unwrapped(mode, chunk)) is not None:
                applied.submit(tracker.on_event(ns, "tools", tool_event))
                culprit.see(ns, "tools", tool_event)
                continue
            if mode in options["stream_mode"]:
                applied.submit(tracker.on_event(ns, mode, chunk))
            if mode != "tools":  # the caller's own tools stream: the observer's tool events are above
                culprit.see(ns, mode, chunk)
            yield from user.chunks(ns, mode, chunk)
        yield from user.chunks()
        writer.submit_all(tracker.on_end())
        snapshot = snapshot_of(graph, config, tracker)
        schemas = gated_schemas(graph, snapshot)
    except BaseException as exc:
        evidence.run_orm(raised, operation_id, exc, culprit, retry=isinstance(exc, policy.retry_on))
        writer.settle(durable=policy.durable)
        raise
    outcome = evidence.run_orm(
        conclude_run,
        operation_id,
        snapshot,
        policy.wait_policies,
        policy.verifier,
        tracker.checkpointed,
        schemas,
        start.declined,
        reopening.ending_attempt(graph_input),
    )
    return _settled(outcome, policy)


async def _aobserved(
    graph: Any, graph_input: Any, config: dict, policy: Policy, user: UserStream, ended: Ended
) -> AsyncGenerator[Any, None]:
    """`_observed` on `graph.astream`; the Outcome goes to `ended` (an async generator returns nothing)."""
    operation_id = required_operation_id(config)
    driven = _adriven(graph, graph_input, config, policy, user, ended, operation_id)
    with parking.watching(operation_id):
        try:
            async for item in driven:
                yield item
        finally:
            await driven.aclose()  # a caller that closes the stream closes the run's own generator at once


async def _adriven(
    graph: Any,
    graph_input: Any,
    config: dict,
    policy: Policy,
    user: UserStream,
    ended: Ended,
    operation_id: str,
) -> AsyncGenerator[Any, None]:
    start = await evidence.arun_orm(begin, operation_id, config, graph_input, policy)
    if start.parked:
        ended.outcome = await _asettled(Outcome("parked"), policy)
        return
    tracker = tracking.tracker_for(graph, operation_id, policy.route_version)
    config = user.configure(toolevents.watched(marked(config, graph, tracker)))
    options = tracking.stream_options(tracker)
    culprit = Culprit()
    try:
        writer.submit_all(await reconcile.aentries(tracker, graph, config))
        applied = Applied(tracker.checkpointed)
        async for ns, mode, chunk in graph.astream(graph_input, config, **user.options(options)):
            if _root_start(ns, mode, chunk):
                if applied.due():
                    await asyncio.to_thread(applied.stored_before_the_step)  # off the event loop
                if await aparked_now(operation_id):
                    ended.outcome = await _asettled(Outcome("parked"), policy)
                    return
            if (tool_event := toolevents.unwrapped(mode, chunk)) is not None:
                applied.submit(tracker.on_event(ns, "tools", tool_event))
                culprit.see(ns, "tools", tool_event)
                continue
            if mode in options["stream_mode"]:
                applied.submit(tracker.on_event(ns, mode, chunk))
            if mode != "tools":
                culprit.see(ns, mode, chunk)
            for item in user.chunks(ns, mode, chunk):
                yield item
        for item in user.chunks():
            yield item
        writer.submit_all(tracker.on_end())
        snapshot = await asnapshot_of(graph, config, tracker)
        schemas = gated_schemas(graph, snapshot)
    except BaseException as exc:
        await evidence.arun_orm(raised, operation_id, exc, culprit, retry=isinstance(exc, policy.retry_on))
        await asyncio.to_thread(writer.settle, durable=policy.durable)
        raise
    outcome = await evidence.arun_orm(
        conclude_run,
        operation_id,
        snapshot,
        policy.wait_policies,
        policy.verifier,
        tracker.checkpointed,
        schemas,
        start.declined,
        reopening.ending_attempt(graph_input),
    )
    ended.outcome = await _asettled(outcome, policy)


def _settled(outcome: Outcome, policy: Policy) -> Outcome:
    """`outcome`, once the writer stored what it must before the caller learns it (`writer.settle`)."""
    writer.settle(waiting=outcome.status == "waiting", durable=policy.durable)
    return outcome


async def _asettled(outcome: Outcome, policy: Policy) -> Outcome:
    """`_settled` off the event loop."""
    await asyncio.to_thread(writer.settle, waiting=outcome.status == "waiting", durable=policy.durable)
    return outcome


def _exhausted(chunks: Generator[Any, None, Outcome]) -> Outcome:
    while True:
        try:
            next(chunks)
        except StopIteration as stop:
            return stop.value


def _root_start(ns: tuple, mode: str, chunk: Any) -> bool:
    return not ns and mode == "tasks" and isinstance(chunk, Mapping) and "input" in chunk


def marked(config: dict, graph: Any = None, tracker: Tracker | None = None) -> dict:
    """`config` with the observer's mark, which tells `SidewispMiddleware` that this run is observed, and
    how a transfer's `created` is kept ahead of the checkpoint past it (`sidewisp_agent.barrier`)."""
    configurable = {**(config.get("configurable") or {}), OBSERVED_KEY: True}
    if tracker is not None and (how := _barrier(graph, configurable, tracker)) is not None:
        configurable[BARRIER_KEY] = how
    return {**config, "configurable": configurable}


def _barrier(graph: Any, configurable: Mapping[str, Any], tracker: Tracker) -> str | None:
    """The run's checkpointer waits for the writer; or it has none; or None: the middleware flushes."""
    if CONFIG_KEY_CHECKPOINTER in configurable:
        return None  # a checkpointer lent through the config: not ours to guard
    if not tracker.checkpointed:
        return BARRIER_NONE_NEEDED
    saver = getattr(graph, "checkpointer", None)
    return BARRIER_CHECKPOINTER if isinstance(saver, BaseCheckpointSaver) and barrier.guard(saver) else None


observe.stream = observe_stream  # type: ignore[attr-defined]
aobserve.astream = aobserve_stream  # type: ignore[attr-defined]
aobserve.astream_events = aobserve_events  # type: ignore[attr-defined]
