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
`receipts.ingest.lifecycle`) go to the batched writer (`agents.observe.writer`) in one FIFO,
so a wait is stored before the run shows as waiting without a flush; nothing
raises into the graph. The agent's side reads the run's stop flag once, as
`observe` starts (`agents.observe.parking` remembers it for the per-step check), and
waits for the writer once, as it returns. `observe` also works on a thread
that runs an event loop, and `aobserve` is its async twin.

In remote mode (`SIDEWISP_REMOTE_URL`) the run lives on the server: the
observer touches no local database (no run row, status, pending call, parked
check or auto-continue) and sends only entries, `final_status` included.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any, NamedTuple

from django.utils import timezone
from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import Runnable
from langgraph._internal._constants import CONFIG_KEY_CHECKPOINTER
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.pregel._messages import StreamMessagesHandler, graph_namespace
from langgraph.types import Command, Interrupt

from agents.observe import barrier, evidence, parking, tracking, writer
from agents.observe.arguments import arg_schemas
from agents.observe.middleware import (
    BARRIER_CHECKPOINTER,
    BARRIER_KEY,
    BARRIER_NONE_NEEDED,
    OBSERVED_KEY,
    UNKNOWN_TOOL,
    model_failure_reports,
)
from agents.observe.tracking import CONTROL_KEYS, STREAM_MODES, Tracker, context_key_names  # noqa: F401 - re-exported
from receipts.ingest import health as run_health
from receipts.ingest.intake import RunEntry
from receipts.models import MiddlewareReport, Receipt, Run
from receipts.verdicts import bundle

logger = logging.getLogger(__name__)

_STATUS = {
    "complete": Run.Status.COMPLETE,
    "waiting": Run.Status.WAITING,
    "failed": Run.Status.FAILED,
    "parked": Run.Status.PARKED,
}
_RESOLUTIONS = {"approve": "approved", "edit": "edited", "reject": "rejected"}
UNREAD = object()  # a run's declined resolution not known yet: `verify` reads it
DECISION_ORDER = ("approve", "edit", "reject")


@dataclass(frozen=True)
class WaitPolicy:
    """Who owns an approval wait for a gated tool, why, and for how long."""

    owner: str | None
    reason: str | None
    deadline_minutes: int | None


@dataclass
class Outcome:
    status: str  # complete | waiting | failed | parked
    interrupts: list[Interrupt] = field(default_factory=list)
    error: str = ""


Verifier = Callable[[str], tuple[str, str, str] | None]  # operation_id -> (name, result, receipt id)
ClaimCheck = Callable[[str], bool]  # the final AI message's text -> it claims the gated action was done

# A wait answered this way means the gated action must NOT have happened (spec §1 v1.1).
DECLINED = frozenset({"rejected", "expired"})
# Words by which a final message admits the action was not done ("I did not place the order").
_ADMITS_NOT_DONE = re.compile(
    r"\b(?:not|never|declined|rejected|refused|denied|cancell?ed|unable|cannot|expired|withdrawn)\b|n['\u2019]t\b",
    re.IGNORECASE,
)


def claims_done(text: str) -> bool:
    """The default claim check: a final message claims the gated action was done unless it says it was not.

    Fail closed: silence or a friendly "All set!" counts as a claim. A graph whose agents answer in other
    words (or in structured output) gives its own check as its verifier's `claims_done` attribute
    (`OutcomeVerifier(check, claims_done=...)`).
    """
    return not _ADMITS_NOT_DONE.search(text or "")


@dataclass(frozen=True)
class OutcomeVerifier:
    """A verifier with its own claim check: `check(operation_id)` gives (name, pass|fail, receipt id) or None;
    `claims_done(final message text)` says whether the agent claims the gated action was done."""

    check: Verifier
    claims_done: ClaimCheck = claims_done

    def __call__(self, operation_id: str) -> tuple[str, str, str] | None:
        return self.check(operation_id)


class _Snapshot(NamedTuple):
    values: Mapping[str, Any]
    next: tuple[str, ...]
    interrupts: tuple[Interrupt, ...]


def observe(
    graph: Any,
    graph_input: Any,
    config: dict,
    *,
    wait_policies: Mapping[str, WaitPolicy] | None = None,
    verifier: Verifier | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    route_version: str | None = None,
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
    `observe.stream(...)` runs the same way and gives the caller the chunks of
    their own stream modes on the way.
    """
    policy = _Policy(wait_policies or {}, verifier, retry_on, route_version)
    return _exhausted(_observed(graph, graph_input, config, policy, _UserStream()))


async def aobserve(
    graph: Any,
    graph_input: Any,
    config: dict,
    *,
    wait_policies: Mapping[str, WaitPolicy] | None = None,
    verifier: Verifier | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    route_version: str | None = None,
) -> Outcome:
    """`observe` on `graph.astream` (async tools and hooks; the ORM in worker threads); `aobserve.astream` streams."""
    ended = _Ended()
    policy = _Policy(wait_policies or {}, verifier, retry_on, route_version)
    async for _ in _aobserved(graph, graph_input, config, policy, _UserStream(), ended):
        pass
    return ended.outcome


def conclude(
    graph: Any, config: dict, *, wait_policies: Mapping[str, WaitPolicy] | None = None, verifier: Verifier | None = None
) -> Outcome:
    """Record the outcome of the thread as its checkpoint shows it, and the run's final status (idempotent)."""
    operation_id = evidence.operation_id_of(config) or ""
    writer.submit_all(_tracker_for(graph, operation_id).on_start(graph, config))
    state = graph.get_state(config)
    snapshot = _Snapshot(state.values, tuple(state.next), tuple(state.interrupts))
    schemas = _schemas(graph, snapshot)
    return evidence.run_orm(_conclude, operation_id, snapshot, wait_policies or {}, verifier, True, schemas)


async def aconclude(
    graph: Any, config: dict, *, wait_policies: Mapping[str, WaitPolicy] | None = None, verifier: Verifier | None = None
) -> Outcome:
    """`conclude` for async checkpointers (`aget_state`)."""
    operation_id = evidence.operation_id_of(config) or ""
    writer.submit_all(await _tracker_for(graph, operation_id).aon_start(graph, config))
    state = await graph.aget_state(config)
    snapshot = _Snapshot(state.values, tuple(state.next), tuple(state.interrupts))
    schemas = _schemas(graph, snapshot)
    return await evidence.arun_orm(_conclude, operation_id, snapshot, wait_policies or {}, verifier, True, schemas)


def _conclude(
    operation_id: str,
    snapshot: _Snapshot,
    wait_policies: Mapping[str, WaitPolicy],
    verifier: Verifier | None,
    persisted: bool,
    schemas: Mapping[str, Mapping] | None = None,
    declined: object = UNREAD,
) -> Outcome:
    if snapshot.interrupts:
        for pending in snapshot.interrupts:
            record_wait(operation_id, pending, wait_policies, persisted=persisted, resolved=False)
        _record_final(operation_id, "waiting", evidence.digest(*(i.id for i in snapshot.interrupts)))
        outcome = Outcome("waiting", interrupts=list(snapshot.interrupts))
    elif snapshot.next:
        # Halted before a node without an interrupt (e.g. a node held by interrupt_before).
        _record_final(operation_id, "running", f"held-{evidence.digest(*snapshot.next)}")
        outcome = Outcome("parked", error=run_health.held_before(snapshot.next))  # not auto-continue stopped
    else:
        outcome = _ending(operation_id, snapshot, verifier, declined)
    if not writer.remote():  # the server keeps a remote run's lifecycle
        pending = None
        if outcome.status == "waiting":
            call = partial(pending_call_of, operation_id, snapshot.interrupts, schemas or {})
            pending = evidence.guarded(operation_id, "run", call)
        # After the run's receipts in the writer's FIFO: a wait is stored before the run says it waits.
        _submit_run(operation_id, _STATUS[outcome.status], error=outcome.error, pending_call=pending, final=True)
    writer.flush()  # the run's one flush: its last receipts and its status are stored before observe returns
    return outcome


def _ending(operation_id: str, snapshot: _Snapshot, verifier: Verifier | None, declined: object) -> Outcome:
    messages: list[BaseMessage] = list(snapshot.values.get("messages") or [])
    last = messages[-1] if messages else None
    failures = model_failure_reports([last]) if last is not None else []
    if failures:
        agent = snapshot.values.get("active_agent") or getattr(last, "name", None) or "agent"
        evidence.submit_report(operation_id, agent, *failures[0])
    if not isinstance(last, AIMessage) or last.tool_calls or failures:
        # No agent claimed completion (a transfer that led nowhere, or a dead model).
        _record_final(operation_id, "failed", "end")
        return Outcome("failed", error="NoCompletionClaim")
    if verifier is not None:
        final = message_text(last)
        check = partial(verify, operation_id, verifier, attempt="end", final_message=final, declined=declined)
        evidence.guarded(operation_id, "verification", check)
    _record_final(operation_id, "complete", "end")
    return Outcome("complete")


def verify(
    operation_id: str,
    verifier: Verifier,
    *,
    attempt: str,
    final_message: str | None = None,
    declined: object = UNREAD,
) -> str | None:
    """Run the outcome verifier and record `verification` on the latest handoff; the result or None.

    After a wait was `rejected` or `expired` (the run's latest decided wait), the outcome to prove is the
    opposite (spec §1 v1.1): the verifier's own check must FAIL (the gated action did not happen) AND the
    final message must not claim it was done (the verifier's `claims_done`, else `claims_done` here; no
    final message counts as a claim). The receipt then names `<verifier>.declined`. `declined` is that
    resolution (or None) when the caller knows it already, as `observe` does from its start; else it is read.
    """
    found = verifier(operation_id)
    if found is None:
        return None
    name, result, receipt_id = found
    resolution = declined_resolution(operation_id) if declined is UNREAD else declined
    if resolution is not None:
        claim_check = getattr(verifier, "claims_done", None) or claims_done
        claimed = final_message is None or bool(claim_check(final_message))
        result = "pass" if result == "fail" and not claimed else "fail"
        name = f"{name}.declined"
        receipt_id = f"v-{evidence.digest(receipt_id, resolution, claimed)}"
    value = {"verifier": name, "result": result, "checked_at": evidence.now_iso(), "receipt_id": receipt_id}
    evidence.submit_outcome(operation_id, "verification", value, attempt=f"verify-{attempt}")
    return result


def declined_resolution(operation_id: str) -> str | None:
    """`rejected` or `expired` when the run's latest decided wait was declined, else None.

    In remote mode the waits are on the server: the decision this process resumed the run with decides.
    """
    if writer.remote():
        resolution = _resumed_with.get(operation_id)
        return resolution if resolution in DECLINED else None
    waits = Receipt.objects.filter(handoff__run__operation_id=operation_id, part="wait").order_by("-recorded_at", "-pk")
    for payload in waits.values_list("payload", flat=True)[:50]:
        if isinstance(payload, Mapping) and payload.get("resolved") is True:
            resolution = payload.get("resolution")
            return resolution if resolution in DECLINED else None
    return None


def message_text(message: object) -> str | None:
    """The text of an AI message (its text blocks joined), or None when it is not one."""
    if not isinstance(message, AIMessage):
        return None
    content = message.content
    if isinstance(content, str):
        return content
    blocks = [b.get("text", "") if isinstance(b, Mapping) else str(b) for b in content or ()]
    return " ".join(t for t in blocks if isinstance(t, str))


def final_message_of(values: Mapping[str, Any]) -> str | None:
    """The text of the thread's last message when it is an AI message (what the agent said last)."""
    messages = list(values.get("messages") or []) if isinstance(values, Mapping) else []
    return message_text(messages[-1]) if messages else None


def resume_token_id(operation_id: str, interrupt_id: str) -> str:
    return f"rt-{evidence.digest(operation_id, interrupt_id)}"


def record_wait(
    operation_id: str, pending: Interrupt, wait_policies: Mapping[str, WaitPolicy], *, persisted: bool, resolved: bool
) -> None:
    policy = _policy_for(pending, wait_policies)
    deadline = None
    if policy.deadline_minutes:
        deadline = (timezone.now() + timedelta(minutes=policy.deadline_minutes)).isoformat()
    wait = {
        "owner": policy.owner or None,
        "reason": policy.reason or None,
        "deadline_utc": deadline,
        "resume_token_id": resume_token_id(operation_id, pending.id),
        "state_persisted": persisted,
        "resolved": resolved,
    }
    state = "resolved" if resolved else "open"
    evidence.submit_outcome(operation_id, "wait", wait, attempt=f"{state}-{evidence.digest(pending.id)}")


def gated_tools(pending: Interrupt) -> list[str]:
    value = pending.value if isinstance(pending.value, Mapping) else {}
    return [str(request.get("name")) for request in value.get("action_requests", [])]


def _policy_for(pending: Interrupt, wait_policies: Mapping[str, WaitPolicy]) -> WaitPolicy:
    for name in gated_tools(pending):
        if name in wait_policies:
            return wait_policies[name]
    return WaitPolicy(owner=None, reason=None, deadline_minutes=None)


def pending_call_of(
    operation_id: str, interrupts: Sequence[Interrupt], schemas: Mapping[str, Mapping] | None = None
) -> dict:
    """An approval wait as names only (never argument values), as `Run.pending_call` holds it.

    `arg_schema` is the gated tools' argument schema (`agents.observe.arguments.arg_schemas`: types and declared
    ranges), what an edit is validated against for observed runs too.
    """
    tools: list[str] = []
    arg_types: dict[str, str] = {}
    arg_schema: dict[str, Mapping] = {}
    allowed: set[str] = set()
    entries = []
    for pending in interrupts:
        value = pending.value if isinstance(pending.value, Mapping) else {}
        requests = [r for r in value.get("action_requests", []) if isinstance(r, Mapping)]
        for request in requests:
            # The gated call's tool and argument names come from the model: kept only when they pass the
            # same check as every stored string (a made-up name could be a secret or a path).
            name = str(request.get("name"))
            tools.append(UNKNOWN_TOOL if bundle.text_problem(name) else name)
            arg_schema.update((schemas or {}).get(name) or {})
            args = request.get("args")
            for key, arg in args.items() if isinstance(args, Mapping) else ():
                if not bundle.text_problem(str(key)) and len(arg_types) < bundle.MAX_LIST_ENTRIES:
                    arg_types[str(key)] = type(arg).__name__
        for review in value.get("review_configs", []):
            allowed |= set(review.get("allowed_decisions", ())) if isinstance(review, Mapping) else set()
        entries.append({"id": pending.id, "calls": len(requests)})
    return {
        "tool": ", ".join(tools),
        "arg_types": arg_types,
        "arg_schema": {key: dict(value) for key, value in arg_schema.items() if key in arg_types},
        "allowed_decisions": [d for d in DECISION_ORDER if d in allowed],
        "resume_token_id": resume_token_id(operation_id, interrupts[0].id) if interrupts else None,
        "interrupts": entries,
    }


def resolution_of(resume: object) -> dict[str | None, str | None]:
    """How a HITL resume value decided: {interrupt id or None (all): approved/edited/rejected or None}."""
    if isinstance(resume, Mapping) and "decisions" not in resume:
        return {str(key): _resolution(value) for key, value in resume.items()}
    return {None: _resolution(resume)}


def _resolution(value: object) -> str | None:
    decisions = value.get("decisions") if isinstance(value, Mapping) else None
    kinds = {d.get("type") for d in decisions or () if isinstance(d, Mapping)}
    return _RESOLUTIONS.get(kinds.pop()) if len(kinds) == 1 else None


# Remote mode keeps no waits locally: how this process last resumed each run (bounded, oldest forgotten).
_resumed_with: dict[str, str | None] = {}
_REMEMBERED_RESUMES = 1024


def _remember_resume(operation_id: str, graph_input: Any) -> None:
    if not isinstance(graph_input, Command) or graph_input.resume is None:
        return
    decided = set(resolution_of(graph_input.resume).values())
    _resumed_with.pop(operation_id, None)
    _resumed_with[operation_id] = decided.pop() if len(decided) == 1 else None
    while len(_resumed_with) > _REMEMBERED_RESUMES:
        _resumed_with.pop(next(iter(_resumed_with)))


def _operation_id(config: dict) -> str:
    operation_id = evidence.operation_id_of(config)
    if operation_id is None:
        msg = "config needs configurable.operation_id or configurable.thread_id"
        raise ValueError(msg)
    return operation_id


def _tracker_for(graph: Any, operation_id: str, route_version: str | None = None) -> Tracker:
    return tracking.tracker_for(graph, operation_id, route_version)


def _stream_options(tracker: Tracker) -> dict[str, Any]:
    return tracking.stream_options(tracker)


def _root_start(ns: tuple, mode: str, chunk: Any) -> bool:
    return not ns and mode == "tasks" and isinstance(chunk, Mapping) and "input" in chunk


def _snapshot(graph: Any, config: dict, tracker: Tracker) -> _Snapshot:
    if not tracker.checkpointed:
        return _Snapshot(tracker.state, (), tuple(tracker.interrupts))
    state = graph.get_state(config)
    return _Snapshot(state.values, tuple(state.next), tuple(state.interrupts))


async def _asnapshot(graph: Any, config: dict, tracker: Tracker) -> _Snapshot:
    if not tracker.checkpointed:
        return _Snapshot(tracker.state, (), tuple(tracker.interrupts))
    state = await graph.aget_state(config)
    return _Snapshot(state.values, tuple(state.next), tuple(state.interrupts))


@dataclass(frozen=True)
class _Start:
    parked: bool  # an operator stopped the run: it is not driven
    declined: object = UNREAD  # the run's latest decided wait's resolution when declined, when known


def _begin(operation_id: str, config: dict, graph_input: Any, policy: _Policy) -> _Start:
    """Read the run's stop flag (the database is the truth at every start and resume) and hand its start
    to the writer: created when new, its waits resolved on a resume, running; parked when stopped.

    One indexed query on the caller's thread (two for an existing run that is not resumed and has a
    verifier: its latest decided wait); the run's writes go to the writer, in the receipts' FIFO.
    """
    # Unread (the database away): driven as not stopped, as observation never stops the observed.
    exists, is_stopped = evidence.guarded(operation_id, "run", partial(_stop_flag, operation_id)) or (True, False)
    configurable = config.get("configurable") or {}
    thread_id = str(configurable.get("thread_id") or operation_id)
    # issue 22 §2: `configurable.graph_name` names the graph, whose team owns the run (receipts.org.teams).
    graph = _graph_name(configurable.get("graph_name"))
    if is_stopped:
        logger.info("run %s parked: auto-continue stopped", operation_id)
        _submit_run(operation_id, Run.Status.PARKED, thread_id=thread_id, graph=graph)
        return _Start(parked=True)
    resumed = None
    declined: object = None
    if isinstance(graph_input, Command) and graph_input.resume is not None:
        decided = resolution_of(graph_input.resume)
        resumed = {resume_token_id(operation_id, key) if key is not None else None: v for key, v in decided.items()}
        declined = _declined_by(decided)
    elif exists and policy.verifier is not None:
        declined = UNREAD  # decided in an earlier call: read when the verifier runs
    _submit_run(operation_id, Run.Status.RUNNING, thread_id=thread_id, resumed=resumed, graph=graph)
    return _Start(parked=False, declined=declined)


def _stop_flag(operation_id: str) -> tuple[bool, bool]:
    """(the run exists, an operator stopped it), read from the database and remembered (agents.observe.parking)."""
    read_at = time.monotonic()
    flag = Run.objects.filter(operation_id=operation_id).values_list("auto_continue", flat=True).first()
    parking.learn({operation_id: flag is False}, read_at)
    return flag is not None, flag is False


def _declined_by(decided: Mapping[str | None, str | None]) -> str | None:
    """The resolution a resume gave every wait it answered, when that is a declining one."""
    resolutions = set(decided.values())
    resolution = resolutions.pop() if len(resolutions) == 1 else None
    return resolution if resolution in DECLINED else None


def _submit_run(operation_id: str, status: str, **change: Any) -> None:
    """Hand a change of the run's lifecycle to the writer (`receipts.ingest.lifecycle`), after its receipts."""
    writer.submit(RunEntry(operation_id, status, **change))


def _graph_name(value: object) -> str:
    """The observed run's graph name, or "" (none given, or not a name: logged by class, never by value)."""
    if value is None:
        return ""
    try:
        return bundle.parse_name(value, "graph_name")[:100]
    except bundle.BundleError:
        logger.warning("configurable.graph_name is not a name; the run is recorded without one")
        return ""


def _parked_now(operation_id: str) -> bool:
    """Before a root step: an operator stopped the run (from memory; the database when that is stale).

    The run is then left at its last checkpoint (durability "sync") before the step starts, parked;
    resuming auto-continue drives it on from there.
    """
    is_stopped = parking.stopped(operation_id)
    if is_stopped is None:
        is_stopped = bool(evidence.guarded(operation_id, "run", partial(evidence.run_orm, parking.read, operation_id)))
    return is_stopped and _park(operation_id)


async def _aparked_now(operation_id: str) -> bool:
    """`_parked_now` for `aobserve`: a database read, when due, off the event loop."""
    is_stopped = parking.stopped(operation_id)
    if is_stopped is None:
        read = partial(evidence.arun_orm, parking.read, operation_id)
        try:
            is_stopped = await read()
        except Exception as exc:  # noqa: BLE001 - observation never breaks the observed graph
            logger.warning("run %s: stop flag not read: %s", operation_id, type(exc).__name__)
            is_stopped = False
    return is_stopped and await asyncio.to_thread(_park, operation_id)


@dataclass
class _Applied:
    """A checkpointed run's applied transfers: their `reduced` is stored before the next root step starts.

    The crash promise of "Evidence after a crash": a worker killed in the step after a transfer leaves the
    resumed run a checkpoint history from which `agents.observe.reconcile` re-derives what that step left unstored;
    the transfer's `reduced` (submitted once the parent saved the step that applied it) is not among it. So
    the step after a transfer waits for the writer to reach the mark after that `reduced` (a wait only in
    steps that follow a transfer, only with a checkpointer). A run without one has no history to resume
    from and never waits here.
    """

    checkpointed: bool
    mark: int | None = None

    def submit(self, entries: list) -> None:
        writer.submit_all(entries)
        if self.checkpointed and any(getattr(entry, "part", None) == "reduced" for entry in entries):
            self.mark = writer.get().mark()

    def due(self) -> bool:
        return self.mark is not None

    def stored_before_the_step(self) -> None:
        if self.mark is not None:
            mark, self.mark = self.mark, None
            writer.get().wait_for(mark)


def _park(operation_id: str) -> bool:
    logger.info("run %s parked: auto-continue stopped", operation_id)
    _submit_run(operation_id, Run.Status.PARKED, final=True)
    writer.flush()  # the run's one flush: it ends here
    return True


def _failed(operation_id: str, error: str) -> None:
    _record_final(operation_id, "failed", "error")
    if not writer.remote():
        _submit_run(operation_id, Run.Status.FAILED, error=error, final=True)
    writer.flush()


def _schemas(graph: Any, snapshot: _Snapshot) -> dict[str, dict]:
    """The gated tools' argument schemas, read from the graph's tools; {} when they cannot be read."""
    if not snapshot.interrupts:
        return {}
    try:
        return arg_schemas(graph, [name for pending in snapshot.interrupts for name in gated_tools(pending)])
    except Exception:  # observation never breaks the observed: no schema, names only
        logger.warning("tool schemas not read", exc_info=True)
        return {}


def _record_final(operation_id: str, status: str, attempt: str) -> None:
    evidence.submit_outcome(operation_id, "final_status", status, attempt=f"{status}-{attempt}")


# --- driving the graph: observe, aobserve and their streams ----------------------------------

# What a run that raised says when its caller closed the stream before the run ended.
STREAM_CLOSED = "StreamClosed"
_NODE_SEPARATOR = " › "  # noqa: RUF001 - a single guillemet between node names is meant
_REMEMBERED_TOOL_CALLS = 1000


@dataclass(frozen=True)
class _Policy:
    wait_policies: Mapping[str, WaitPolicy]
    verifier: Verifier | None
    retry_on: tuple[type[BaseException], ...]
    route_version: str | None = None


@dataclass
class _Ended:
    outcome: Outcome | None = None


def _observed(
    graph: Any, graph_input: Any, config: dict, policy: _Policy, user: _UserStream
) -> Generator[Any, None, Outcome]:
    """The one driver of `observe` and `observe.stream`: yields the caller's chunks, returns the Outcome."""
    operation_id = _operation_id(config)
    local = not writer.remote()
    if not local:
        _remember_resume(operation_id, graph_input)
    with parking.watching(operation_id):
        return (yield from _driven(graph, graph_input, config, policy, user, operation_id, local))


def _driven(
    graph: Any, graph_input: Any, config: dict, policy: _Policy, user: _UserStream, operation_id: str, local: bool
) -> Generator[Any, None, Outcome]:
    start = evidence.run_orm(_begin, operation_id, config, graph_input, policy) if local else _Start(False)
    if start.parked:
        writer.flush()  # the run's one flush
        return Outcome("parked")
    tracker = _tracker_for(graph, operation_id, policy.route_version)
    config = user.configure(marked(config, graph, tracker))
    options = _stream_options(tracker)
    culprit = _Culprit()
    try:
        writer.submit_all(tracker.on_start(graph, config))
        applied = _Applied(tracker.checkpointed)
        for ns, mode, chunk in graph.stream(graph_input, config, **user.options(options)):
            if _root_start(ns, mode, chunk):
                applied.stored_before_the_step()
                if local and _parked_now(operation_id):
                    return Outcome("parked")
            if mode in options["stream_mode"]:
                applied.submit(tracker.on_event(ns, mode, chunk))
            culprit.see(ns, mode, chunk)
            yield from user.chunks(ns, mode, chunk)
        yield from user.chunks()
        writer.submit_all(tracker.on_end())
        snapshot = _snapshot(graph, config, tracker)
        schemas = _schemas(graph, snapshot)
    except BaseException as exc:
        evidence.run_orm(_raised, operation_id, exc, culprit, retry=isinstance(exc, policy.retry_on))
        raise
    return evidence.run_orm(
        _conclude,
        operation_id,
        snapshot,
        policy.wait_policies,
        policy.verifier,
        tracker.checkpointed,
        schemas,
        start.declined,
    )


async def _aobserved(
    graph: Any, graph_input: Any, config: dict, policy: _Policy, user: _UserStream, ended: _Ended
) -> AsyncGenerator[Any, None]:
    """`_observed` on `graph.astream`; the Outcome goes to `ended` (an async generator returns nothing)."""
    operation_id = _operation_id(config)
    local = not writer.remote()
    if not local:
        _remember_resume(operation_id, graph_input)
    driven = _adriven(graph, graph_input, config, policy, user, ended, operation_id, local)
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
    policy: _Policy,
    user: _UserStream,
    ended: _Ended,
    operation_id: str,
    local: bool,
) -> AsyncGenerator[Any, None]:
    start = await evidence.arun_orm(_begin, operation_id, config, graph_input, policy) if local else _Start(False)
    if start.parked:
        await asyncio.to_thread(writer.flush)  # the run's one flush
        ended.outcome = Outcome("parked")
        return
    tracker = _tracker_for(graph, operation_id, policy.route_version)
    config = user.configure(marked(config, graph, tracker))
    options = _stream_options(tracker)
    culprit = _Culprit()
    try:
        writer.submit_all(await tracker.aon_start(graph, config))
        applied = _Applied(tracker.checkpointed)
        async for ns, mode, chunk in graph.astream(graph_input, config, **user.options(options)):
            if _root_start(ns, mode, chunk):
                if applied.due():
                    await asyncio.to_thread(applied.stored_before_the_step)  # off the event loop
                if local and await _aparked_now(operation_id):
                    ended.outcome = Outcome("parked")
                    return
            if mode in options["stream_mode"]:
                applied.submit(tracker.on_event(ns, mode, chunk))
            culprit.see(ns, mode, chunk)
            for item in user.chunks(ns, mode, chunk):
                yield item
        for item in user.chunks():
            yield item
        writer.submit_all(tracker.on_end())
        snapshot = await _asnapshot(graph, config, tracker)
        schemas = _schemas(graph, snapshot)
    except BaseException as exc:
        await evidence.arun_orm(_raised, operation_id, exc, culprit, retry=isinstance(exc, policy.retry_on))
        raise
    ended.outcome = await evidence.arun_orm(
        _conclude,
        operation_id,
        snapshot,
        policy.wait_policies,
        policy.verifier,
        tracker.checkpointed,
        schemas,
        start.declined,
    )


def _exhausted(chunks: Generator[Any, None, Outcome]) -> Outcome:
    while True:
        try:
            next(chunks)
        except StopIteration as stop:
            return stop.value


def marked(config: dict, graph: Any = None, tracker: Tracker | None = None) -> dict:
    """`config` with the observer's mark, which tells `SidewispMiddleware` that this run is observed, and
    how a transfer's `created` is kept ahead of the checkpoint past it (`agents.observe.barrier`)."""
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


def _raised(operation_id: str, exc: BaseException, culprit: _Culprit, *, retry: bool) -> None:
    """Record what the caller is about to get: a retry expected, a closed stream, or a failure and where."""
    error = type(exc).__name__
    if isinstance(exc, GeneratorExit):
        logger.info("run %s: its caller closed the stream before the run ended", operation_id)
        _failed(operation_id, STREAM_CLOSED)
    elif retry:
        logger.warning("run %s: %s, a retry is expected", operation_id, error)
        _retry_expected(operation_id, error)
    else:
        logger.warning("run %s failed: %s", operation_id, error)
        if isinstance(exc, Exception):
            detail = culprit.detail(error)
            attempt = f"error-{evidence.digest(*detail.values())}"
            evidence.submit_report(operation_id, evidence.OBSERVER, MiddlewareReport.Kind.GRAPH_ERROR, detail, attempt)
        _failed(operation_id, error)


def _retry_expected(operation_id: str, error: str) -> None:
    if not writer.remote():
        _submit_run(operation_id, Run.Status.QUEUED, error=error)  # an existing run only: a start named no thread
    writer.flush()


@dataclass
class _Culprit:
    """Where a run raised, from its `tasks` and `tools` streams: the failing node's path and tool, names only.

    A tool error whose ToolMessage a later task result carries was handled (ToolNode, ToolRetryMiddleware)
    and names nothing.
    """

    node: tuple[str, ...] = ()
    tool: str | None = None
    started: dict[str, str] = field(default_factory=dict)  # tool call id -> tool name
    tool_errors: dict[tuple[str, ...], tuple[str, str]] = field(default_factory=dict)  # ns -> (call id, tool)

    def see(self, ns: tuple[str, ...], mode: str, chunk: Any) -> None:
        if not isinstance(chunk, Mapping):
            return
        if mode == "tools":
            self._see_tool(ns, chunk)
        elif mode == "tasks" and "input" not in chunk:
            if chunk.get("error") is not None:
                self._see_error(ns, str(chunk.get("name")))
            else:
                answered = _tool_call_ids_in(chunk.get("result"))
                for key, (call_id, _) in list(self.tool_errors.items()):
                    if call_id in answered:
                        del self.tool_errors[key]

    def _see_tool(self, ns: tuple[str, ...], chunk: Mapping) -> None:
        call_id, event = str(chunk.get("tool_call_id")), chunk.get("event")
        if event == "tool-started" and len(self.started) < _REMEMBERED_TOOL_CALLS:
            self.started[call_id] = str(chunk.get("tool_name") or "")
        elif event == "tool-error":
            self.tool_errors[ns] = (call_id, self.started.pop(call_id, ""))
        elif event == "tool-finished":
            self.started.pop(call_id, None)

    def _see_error(self, ns: tuple[str, ...], name: str) -> None:
        path = (*(tracking.node_of(segment) for segment in ns), name)
        # The innermost failing task is seen first; the tasks around it fail with the same error.
        if self.node and path[: len(self.node)] != self.node:
            return
        self.node = path
        _, tool = self.tool_errors.get(ns, ("", None))
        self.tool = (UNKNOWN_TOOL if bundle.text_problem(tool) else tool) if tool else None

    def detail(self, error: str) -> dict[str, str]:
        detail = {"error": error}
        if self.node:
            detail["node"] = _NODE_SEPARATOR.join(self.node)[: bundle.MAX_STRING_LENGTH]
        if self.tool:
            detail["tool"] = self.tool
        return detail


def _tool_call_ids_in(result: Any) -> set[str]:
    writes = result.items() if isinstance(result, Mapping) else result if isinstance(result, list | tuple) else ()
    ids = set()
    for write in writes:
        value = write[1] if isinstance(write, tuple) and len(write) == 2 else write
        for message in value if isinstance(value, list | tuple) else [value]:
            if isinstance(message, ToolMessage):
                ids.add(message.tool_call_id)
    return ids


@dataclass
class _UserStream:
    """The stream the caller of `observe.stream` asked for, given as `graph.stream` would give it.

    LangGraph is always asked for the observer's modes with subgraphs; the caller gets only their own
    modes, below the root graph only with `subgraphs=True`, shaped by `version` and by whether
    `stream_mode` was a list. `messages` without subgraphs comes from a handler of its own (`_RootMessages`).
    """

    modes: frozenset[str] = frozenset()
    listed: bool = False
    subgraphs: bool = False
    version: str = "v1"
    kwargs: dict[str, Any] = field(default_factory=dict)
    graph: Any = None
    relay: deque | None = None

    @classmethod
    def asked(cls, graph: Any, stream_mode: Any, subgraphs: bool, version: str, kwargs: dict[str, Any]) -> _UserStream:
        if stream_mode is None:
            stream_mode = getattr(graph, "stream_mode", "values")
        modes = frozenset([stream_mode] if isinstance(stream_mode, str) else stream_mode)
        relay = deque() if "messages" in modes and not subgraphs else None
        return cls(modes, isinstance(stream_mode, list), subgraphs, version, dict(kwargs), graph, relay)

    def configure(self, config: dict) -> dict:
        if self.relay is None:
            return config
        return {**config, "callbacks": _with_handler(config.get("callbacks"), _RootMessages(self.relay.append))}

    def options(self, observer: dict[str, Any]) -> dict[str, Any]:
        # "tools" names the tool that raised; "messages" wakes the stream for each token of the relay.
        modes = list(dict.fromkeys([*observer["stream_mode"], "tools", *sorted(self.modes)]))
        return {**self.kwargs, **observer, "stream_mode": modes, "subgraphs": True}

    def chunks(self, ns: tuple[str, ...] = (), mode: str | None = None, chunk: Any = None) -> list[Any]:
        shaped = []
        while self.relay:
            shaped.append(self._shape(*self.relay.popleft()))
        relayed = mode == "messages" and self.relay is not None
        if mode in self.modes and (self.subgraphs or not ns) and not relayed:
            shaped.append(self._shape(ns, mode, chunk))
        return shaped

    def _shape(self, ns: tuple[str, ...], mode: str, chunk: Any) -> Any:
        if self.version == "v2":
            return _v2_part(self.graph, ns, mode, chunk)
        if self.listed:
            return (ns, mode, chunk) if self.subgraphs else (mode, chunk)
        return (ns, chunk) if self.subgraphs else chunk


def _v2_part(graph: Any, ns: tuple[str, ...], mode: str, chunk: Any) -> dict[str, Any]:
    """A `version="v2"` stream part, as LangGraph makes it (state coerced to the graph's schema)."""
    if mode == "values":
        interrupts: tuple = ()
        if isinstance(chunk, dict):
            chunk = dict(chunk)
            interrupts = chunk.pop("__interrupt__", ())
            if (mapper := getattr(graph, "_output_mapper", None)) is not None:
                chunk = mapper(chunk)
        return {"type": mode, "ns": ns, "data": chunk, "interrupts": interrupts}
    if mode in ("checkpoints", "debug") and (mapper := getattr(graph, "_state_mapper", None)) is not None:
        chunk = _coerced(chunk, mapper)
    return {"type": mode, "ns": ns, "data": chunk}


def _coerced(payload: Any, mapper: Callable[[Any], Any]) -> Any:
    if not isinstance(payload, dict):
        return payload
    if payload.get("type") == "checkpoint" and isinstance(payload.get("payload"), dict):
        return {**payload, "payload": _coerced(payload["payload"], mapper)}
    if isinstance(payload.get("values"), dict) and "__start__" not in payload.get("next", ()):
        return {**payload, "values": mapper(payload["values"])}
    return payload


class _RootMessages(StreamMessagesHandler):
    """LangGraph's `messages` handler as `graph.stream(..., subgraphs=False)` attaches it.

    The observer streams subgraphs; LangGraph's own handler would then drop the root nodes' messages
    that a subgraph streamed already (a swarm's final answer would never reach the caller). This one
    ignores every call below the root graph, and says it streams subgraphs only because LangGraph
    removes a caller's handler that does not.
    """

    def __init__(self, put: Callable[[Any], None]) -> None:
        super().__init__(put, subgraphs=True)

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any, **kwargs: Any) -> Any:
        if _below_root(kwargs.get("metadata")):
            return None
        return super().on_chat_model_start(serialized, messages, run_id=run_id, **kwargs)

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any, **kwargs: Any) -> Any:
        if _below_root(kwargs.get("metadata")):
            return None
        return super().on_chain_start(serialized, inputs, run_id=run_id, **kwargs)


def _below_root(metadata: Mapping[str, Any] | None) -> bool:
    return bool(metadata and metadata.get("langgraph_checkpoint_ns") and graph_namespace(metadata))


def _with_handler(callbacks: Any, handler: BaseCallbackHandler) -> Any:
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        return manager
    return [*(callbacks or ()), handler]


class ObservedStream(Iterator[Any]):
    """The caller's chunks of an observed run; `outcome` once it ended (also its StopIteration value)."""

    def __init__(self, chunks: Generator[Any, None, Outcome]) -> None:
        self._chunks = chunks
        self.outcome: Outcome | None = None

    def __iter__(self) -> ObservedStream:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._chunks)
        except StopIteration as stop:
            self.outcome = stop.value
            raise

    def close(self) -> None:
        """Stop the run where it is (recorded as failed with `StreamClosed`), as closing `graph.stream` would."""
        self._chunks.close()


class AsyncObservedStream(AsyncIterator[Any]):
    """The async twin of `ObservedStream`: `outcome` once the run ended."""

    def __init__(self, chunks: AsyncGenerator[Any, None], ended: _Ended) -> None:
        self._chunks = chunks
        self._ended = ended

    @property
    def outcome(self) -> Outcome | None:
        return self._ended.outcome

    def __aiter__(self) -> AsyncObservedStream:
        return self

    async def __anext__(self) -> Any:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._chunks.aclose()


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
    **kwargs: Any,
) -> ObservedStream:
    """`observe.stream`: `observe`, giving the caller the chunks `graph.stream(graph_input, config,
    stream_mode=..., subgraphs=..., version=..., **kwargs)` would give, while Sidewisp records as `observe` does.

    Exceptions and `retry_on` as `observe`. With a checkpointer the observer streams with durability "sync".
    """
    policy = _Policy(wait_policies or {}, verifier, retry_on, route_version)
    user = _UserStream.asked(graph, stream_mode, subgraphs, version, kwargs)
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
    **kwargs: Any,
) -> AsyncObservedStream:
    """`aobserve.astream`: `observe.stream` on `graph.astream` (`async for chunk in ...`)."""
    policy = _Policy(wait_policies or {}, verifier, retry_on, route_version)
    user = _UserStream.asked(graph, stream_mode, subgraphs, version, kwargs)
    ended = _Ended()
    return AsyncObservedStream(_aobserved(graph, graph_input, config, policy, user, ended), ended)


class _ObservedRunnable(Runnable):
    """A graph as `astream_events` drives it, its `astream` observed (LangChain's event streamer taps it)."""

    def __init__(self, graph: Any, observing: dict[str, Any]) -> None:
        self.graph = graph
        self.observing = observing
        self.ended = _Ended()

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
    **kwargs: Any,
) -> AsyncObservedStream:
    """`aobserve.astream_events`: the events `graph.astream_events(graph_input, config, version=...)` gives
    ("v1" or "v2"), while Sidewisp records as `observe` does; `outcome` once the run ended."""
    observing = {
        "wait_policies": wait_policies,
        "verifier": verifier,
        "retry_on": retry_on,
        "route_version": route_version,
    }
    runnable = _ObservedRunnable(graph, observing)
    events = runnable.astream_events(graph_input, config, version=version, **kwargs)
    return AsyncObservedStream(events, runnable.ended)


observe.stream = observe_stream  # type: ignore[attr-defined]
aobserve.astream = aobserve_stream  # type: ignore[attr-defined]
aobserve.astream_events = aobserve_events  # type: ignore[attr-defined]
