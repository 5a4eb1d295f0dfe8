"""The end of an observed run: its outcome as the checkpoint shows it, the verifier's receipt and the final status.

`conclude` (and its async twin) records that outcome for a thread on its own, stored before it returns;
`observe` ends every run through `conclude_run` and waits for the writer only where it must (`observe`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from functools import partial
from typing import Any, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage
from langgraph.types import Interrupt

from . import entries as intake
from . import evidence, reconcile, store, tracking, writer
from .arguments import arg_schemas
from .kinds import RunStatus, held_before
from .middleware import model_failure_reports
from .outcomes import Outcome, Verifier, WaitPolicy, claims_done
from .runs import record_final, submit_run
from .tracking import Tracker
from .waits import UNREAD, declined_resolution, gated_tools, pending_call_of, record_wait

logger = logging.getLogger(__name__)

_STATUS = {
    "complete": RunStatus.COMPLETE,
    "waiting": RunStatus.WAITING,
    "failed": RunStatus.FAILED,
    "parked": RunStatus.PARKED,
}


class Snapshot(NamedTuple):
    values: Mapping[str, Any]
    next: tuple[str, ...]
    interrupts: tuple[Interrupt, ...]


def conclude(
    graph: Any, config: dict, *, wait_policies: Mapping[str, WaitPolicy] | None = None, verifier: Verifier | None = None
) -> Outcome:
    """Record the outcome of the thread as its checkpoint shows it, and the run's final status (idempotent)."""
    operation_id = evidence.operation_id_of(config) or ""
    writer.submit_all(reconcile.entries(tracking.tracker_for(graph, operation_id), graph, config))
    state = graph.get_state(config)
    snapshot = Snapshot(state.values, tuple(state.next), tuple(state.interrupts))
    schemas = gated_schemas(graph, snapshot)
    outcome = evidence.run_orm(conclude_run, operation_id, snapshot, wait_policies or {}, verifier, True, schemas)
    writer.flush()  # what `conclude` recorded is stored as it returns
    return outcome


async def aconclude(
    graph: Any, config: dict, *, wait_policies: Mapping[str, WaitPolicy] | None = None, verifier: Verifier | None = None
) -> Outcome:
    """`conclude` for async checkpointers (`aget_state`)."""
    operation_id = evidence.operation_id_of(config) or ""
    writer.submit_all(await reconcile.aentries(tracking.tracker_for(graph, operation_id), graph, config))
    state = await graph.aget_state(config)
    snapshot = Snapshot(state.values, tuple(state.next), tuple(state.interrupts))
    schemas = gated_schemas(graph, snapshot)
    policies = wait_policies or {}
    outcome = await evidence.arun_orm(conclude_run, operation_id, snapshot, policies, verifier, True, schemas)
    await asyncio.to_thread(writer.flush)
    return outcome


def conclude_run(
    operation_id: str,
    snapshot: Snapshot,
    wait_policies: Mapping[str, WaitPolicy],
    verifier: Verifier | None,
    persisted: bool,
    schemas: Mapping[str, Mapping] | None = None,
    declined: object = UNREAD,
    attempt: str = "end",
) -> Outcome:
    """Hand the writer the run's outcome as `snapshot` shows it and its final status, after its receipts.

    `attempt` names the ending (a reopened run's is its own: sidewisp_agent.reopening.ending_attempt).
    """
    if snapshot.interrupts:
        for pending in snapshot.interrupts:
            record_wait(operation_id, pending, wait_policies, persisted=persisted, resolved=False)
        record_final(operation_id, "waiting", evidence.digest(*(i.id for i in snapshot.interrupts)))
        outcome = Outcome("waiting", interrupts=list(snapshot.interrupts))
    elif snapshot.next:
        # Halted before a node without an interrupt (e.g. a node held by interrupt_before).
        record_final(operation_id, "running", f"held-{evidence.digest(*snapshot.next)}")
        outcome = Outcome("parked", error=held_before(snapshot.next))  # not auto-continue stopped
    else:
        outcome = _ending(operation_id, snapshot, verifier, declined, attempt)
    pending = None
    if outcome.status == "waiting":
        call = partial(pending_call_of, operation_id, snapshot.interrupts, schemas or {})
        pending = evidence.guarded(operation_id, "run", call)
    # After the run's receipts in the writer's FIFO: a wait is stored before the run says it waits (a store
    # elsewhere keeps its runs' lifecycle itself: runs.submit_run).
    submit_run(operation_id, _STATUS[outcome.status], error=outcome.error, pending_call=pending, final=True)
    if store.remote() and pending is not None:
        # Issue 30 §3: a remote wait carries its tool and argument key names (never values, nor declared ranges)
        # so its approver does not approve blind; after the wait's receipts in the same FIFO.
        names = {key: value for key, value in pending.items() if key != "arg_schema"}
        writer.submit(intake.PendingEntry(operation_id, names))
    return outcome


def _ending(
    operation_id: str, snapshot: Snapshot, verifier: Verifier | None, declined: object, attempt: str = "end"
) -> Outcome:
    messages: list[BaseMessage] = list(snapshot.values.get("messages") or [])
    last = messages[-1] if messages else None
    failures = model_failure_reports([last]) if last is not None else []
    if failures:
        agent = snapshot.values.get("active_agent") or getattr(last, "name", None) or "agent"
        evidence.submit_report(operation_id, agent, *failures[0])
    if not isinstance(last, AIMessage) or last.tool_calls or failures:
        # No agent claimed completion (a transfer that led nowhere, or a dead model).
        record_final(operation_id, "failed", attempt)
        return Outcome("failed", error="NoCompletionClaim")
    if verifier is not None:
        final = message_text(last)
        check = partial(verify, operation_id, verifier, attempt=attempt, final_message=final, declined=declined)
        evidence.guarded(operation_id, "verification", check)
    record_final(operation_id, "complete", attempt)
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


def snapshot_of(graph: Any, config: dict, tracker: Tracker) -> Snapshot:
    if not tracker.checkpointed:
        return Snapshot(tracker.state, (), tuple(tracker.interrupts))
    state = graph.get_state(config)
    return Snapshot(state.values, tuple(state.next), tuple(state.interrupts))


async def asnapshot_of(graph: Any, config: dict, tracker: Tracker) -> Snapshot:
    if not tracker.checkpointed:
        return Snapshot(tracker.state, (), tuple(tracker.interrupts))
    state = await graph.aget_state(config)
    return Snapshot(state.values, tuple(state.next), tuple(state.interrupts))


def gated_schemas(graph: Any, snapshot: Snapshot) -> dict[str, dict]:
    """The gated tools' argument schemas, read from the graph's tools; {} when they cannot be read."""
    if not snapshot.interrupts:
        return {}
    try:
        return arg_schemas(graph, [name for pending in snapshot.interrupts for name in gated_tools(pending)])
    except Exception:  # observation never breaks the observed: no schema, names only
        logger.warning("tool schemas not read", exc_info=True)
        return {}
