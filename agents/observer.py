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
interrupt, the outcome `verification`, `final_status`) and the run's status
through `receipts.runs.set_status`. Receipts go to the batched writer
(`agents.writer`) and never raise into the graph; the observer flushes it
before the run's status changes (a wait is stored before the run shows as
waiting) and before it returns. `observe` also works on a thread that runs an
event loop, and `aobserve` is its async twin.

In remote mode (`SIDEWISP_REMOTE_URL`) the run lives on the server: the
observer touches no local database (no run row, status, pending call, parked
check or auto-continue) and sends only entries, `final_status` included.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any, NamedTuple

from django.utils import timezone
from langchain_core.messages import AIMessage, BaseMessage
from langgraph.types import Command, Interrupt

from agents import evidence, tracking, writer
from agents.arguments import arg_schemas
from agents.middleware import UNKNOWN_TOOL, model_failure_reports
from agents.tracking import CONTROL_KEYS, STREAM_MODES, Tracker, context_key_names  # noqa: F401 - re-exported
from receipts import bundle, recording, runs
from receipts.models import MiddlewareReport, Receipt, Run
from receipts.recording import record

logger = logging.getLogger(__name__)

_STATUS = {
    "complete": Run.Status.COMPLETE,
    "waiting": Run.Status.WAITING,
    "failed": Run.Status.FAILED,
    "parked": Run.Status.PARKED,
}
_RESOLUTIONS = {"approve": "approved", "edit": "edited", "reject": "rejected"}
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
    """Run `graph` to its end or its next wait, recording receipts and the run's status; never raises for a failed run.

    The Run of `configurable.operation_id` (or the thread id) is created as an
    observed run when it is new. Pass `Command(resume=...)` to resume a wait (the
    wait is marked resolved first). Works on a thread that runs an event loop too.
    An error of a `retry_on` type escapes instead, the run left running for the
    caller to retry from the checkpoint (the hosted runner passes the transient ones).
    """
    operation_id = _operation_id(config)
    local = not writer.remote()
    if not local:
        _remember_resume(operation_id, graph_input)
    if local and evidence.run_orm(_begin, operation_id, config, graph_input):
        return Outcome("parked")
    tracker = _tracker_for(graph, operation_id, route_version)
    try:
        writer.submit_all(tracker.on_start(graph, config))
        for ns, mode, chunk in graph.stream(graph_input, config, **_stream_options(tracker)):
            if local and _root_start(ns, mode, chunk) and evidence.run_orm(_parked_now, operation_id):
                return Outcome("parked")
            writer.submit_all(tracker.on_event(ns, mode, chunk))
        writer.submit_all(tracker.on_end())
        snapshot = _snapshot(graph, config, tracker)
        schemas = _schemas(graph, snapshot)
    except retry_on:
        raise
    except Exception as exc:  # noqa: BLE001 - a failing graph is an outcome to record, not a crash
        logger.warning("run %s failed: %s", operation_id, type(exc).__name__)
        evidence.run_orm(_failed, operation_id, type(exc).__name__)
        return Outcome("failed", error=type(exc).__name__)
    return evidence.run_orm(
        _conclude, operation_id, snapshot, wait_policies or {}, verifier, tracker.checkpointed, schemas
    )


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
    """`observe` on `graph.astream` (async tools and hooks; the ORM in worker threads)."""
    operation_id = _operation_id(config)
    local = not writer.remote()
    if not local:
        _remember_resume(operation_id, graph_input)
    if local and await evidence.arun_orm(_begin, operation_id, config, graph_input):
        return Outcome("parked")
    tracker = _tracker_for(graph, operation_id, route_version)
    try:
        writer.submit_all(await tracker.aon_start(graph, config))
        async for ns, mode, chunk in graph.astream(graph_input, config, **_stream_options(tracker)):
            if local and _root_start(ns, mode, chunk) and await evidence.arun_orm(_parked_now, operation_id):
                return Outcome("parked")
            writer.submit_all(tracker.on_event(ns, mode, chunk))
        writer.submit_all(tracker.on_end())
        snapshot = await _asnapshot(graph, config, tracker)
        schemas = _schemas(graph, snapshot)
    except retry_on:
        raise
    except Exception as exc:  # noqa: BLE001 - a failing graph is an outcome to record, not a crash
        logger.warning("run %s failed: %s", operation_id, type(exc).__name__)
        await evidence.arun_orm(_failed, operation_id, type(exc).__name__)
        return Outcome("failed", error=type(exc).__name__)
    return await evidence.arun_orm(
        _conclude, operation_id, snapshot, wait_policies or {}, verifier, tracker.checkpointed, schemas
    )


def auto_continue_stopped(operation_id: str) -> bool:
    """True when an operator stopped auto-continue for the run (one indexed query)."""
    return Run.objects.filter(operation_id=operation_id, auto_continue=False).exists()


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
) -> Outcome:
    if snapshot.interrupts:
        for pending in snapshot.interrupts:
            record_wait(operation_id, pending, wait_policies, persisted=persisted, resolved=False)
        _record_final(operation_id, "waiting", evidence.digest(*(i.id for i in snapshot.interrupts)))
        outcome = Outcome("waiting", interrupts=list(snapshot.interrupts))
    elif snapshot.next:
        # Halted before a node without an interrupt (e.g. a node held by interrupt_before).
        _record_final(operation_id, "running", f"held-{evidence.digest(*snapshot.next)}")
        outcome = Outcome("parked")
    else:
        outcome = _ending(operation_id, snapshot, verifier)
    # The run's receipts (a wait among them) are stored before its pending call and status say so.
    writer.flush()
    if writer.remote():
        return outcome  # the server keeps the run's lifecycle
    if outcome.status == "waiting":
        store = partial(_store_pending_call, operation_id, snapshot.interrupts, schemas or {})
        evidence.guarded(operation_id, "run", store)
    evidence.guarded(operation_id, "run", partial(_finish, operation_id, outcome))
    return outcome


def _ending(operation_id: str, snapshot: _Snapshot, verifier: Verifier | None) -> Outcome:
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
        check = partial(verify, operation_id, verifier, attempt="end", final_message=final)
        evidence.guarded(operation_id, "verification", check)
    _record_final(operation_id, "complete", "end")
    return Outcome("complete")


def verify(operation_id: str, verifier: Verifier, *, attempt: str, final_message: str | None = None) -> str | None:
    """Run the outcome verifier and record `verification` on the latest handoff; the result or None.

    After a wait was `rejected` or `expired` (the run's latest decided wait), the outcome to prove is the
    opposite (spec §1 v1.1): the verifier's own check must FAIL (the gated action did not happen) AND the
    final message must not claim it was done (the verifier's `claims_done`, else `claims_done` here; no
    final message counts as a claim). The receipt then names `<verifier>.declined`.
    """
    found = verifier(operation_id)
    if found is None:
        return None
    name, result, receipt_id = found
    if (resolution := declined_resolution(operation_id)) is not None:
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

    `arg_schema` is the gated tools' argument schema (`agents.arguments.arg_schemas`: types and declared
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


def _begin(operation_id: str, config: dict, graph_input: Any) -> bool:
    """Get or create the observed run and set it running; True when it is parked (auto-continue stopped)."""
    return bool(evidence.guarded(operation_id, "run", partial(_start_run, operation_id, config, graph_input)))


def _start_run(operation_id: str, config: dict, graph_input: Any) -> bool:
    thread_id = (config.get("configurable") or {}).get("thread_id") or operation_id
    run, _ = Run.objects.get_or_create(
        operation_id=operation_id,
        defaults={"thread_id": str(thread_id), "mode": Run.Mode.OBSERVED, "source": Run.Source.AGENT},
    )
    if problem := recording.owner_problem(run, ""):  # a remote source's run (issue 19): not this app's
        logger.warning("run not observed: %s", problem)
        raise recording.RunNotOwned("operation_id", problem)
    if not run.auto_continue:
        logger.info("run %s parked: auto-continue stopped", operation_id)
        runs.set_status(run, Run.Status.PARKED)
        return True
    if isinstance(graph_input, Command) and graph_input.resume is not None:
        _resolve_waits(run, graph_input.resume)
        if run.pending_call is not None:
            run.pending_call = None
            run.save(update_fields=["pending_call", "updated_at"])
    runs.set_status(run, Run.Status.RUNNING)
    return False


def _resolve_waits(run: Run, resume: object) -> None:
    decided = resolution_of(resume)
    by_token = {resume_token_id(run.operation_id, key): value for key, value in decided.items() if key is not None}
    for handoff in run.handoffs.filter(wait_open=True):
        token = (handoff.wait_part or {}).get("resume_token_id")
        wait = {**handoff.wait_part, "resolved": True, "resolution": by_token.get(token, decided.get(None))}
        write = partial(
            record,
            handoff_id=handoff.handoff_id,
            operation_id=run.operation_id,
            part="wait",
            value=wait,
            attempt=f"resolved-{evidence.digest(token)}",
        )
        evidence.guarded(run.operation_id, "wait", write)


def _parked_now(operation_id: str) -> bool:
    # The previous step's receipts are stored first: an operator who stops the run on seeing them
    # (or anything reacting to them) parks it before the next step.
    writer.flush()
    if not evidence.guarded(operation_id, "run", partial(auto_continue_stopped, operation_id)):
        return False
    # An operator stopped the run: leave the graph at its last checkpoint (durability "sync")
    # before the next step starts; resuming auto-continue drives it on from there.
    logger.info("run %s parked: auto-continue stopped", operation_id)
    evidence.guarded(operation_id, "run", partial(_finish, operation_id, Outcome("parked")))
    return True


def _failed(operation_id: str, error: str) -> None:
    _record_final(operation_id, "failed", "error")
    writer.flush()
    if writer.remote():
        return
    evidence.guarded(operation_id, "run", partial(_finish, operation_id, Outcome("failed", error=error)))


def _store_pending_call(operation_id: str, interrupts: Sequence[Interrupt], schemas: Mapping[str, Mapping]) -> None:
    pending = pending_call_of(operation_id, interrupts, schemas)
    Run.objects.filter(operation_id=operation_id).update(pending_call=pending)


def _schemas(graph: Any, snapshot: _Snapshot) -> dict[str, dict]:
    """The gated tools' argument schemas, read from the graph's tools; {} when they cannot be read."""
    if not snapshot.interrupts:
        return {}
    try:
        return arg_schemas(graph, [name for pending in snapshot.interrupts for name in gated_tools(pending)])
    except Exception:  # observation never breaks the observed: no schema, names only
        logger.warning("tool schemas not read", exc_info=True)
        return {}


def _finish(operation_id: str, outcome: Outcome) -> None:
    run = Run.objects.filter(operation_id=operation_id).first()
    if run is None:
        return
    if outcome.status != "waiting" and evidence.latest_handoff(operation_id) is None:
        detail = {"status": outcome.status}
        evidence.add_report(
            operation_id, evidence.OBSERVER, MiddlewareReport.Kind.NO_HANDOFF, detail, f"end-{outcome.status}"
        )
    runs.set_status(run, _STATUS[outcome.status], error=outcome.error)


def _record_final(operation_id: str, status: str, attempt: str) -> None:
    evidence.submit_outcome(operation_id, "final_status", status, attempt=f"{status}-{attempt}")
