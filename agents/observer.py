"""The graph-level observer: drives a parent graph and records what it did.

It streams the parent graph (`updates`, `tasks`, `custom`, with subgraphs)
and records, for each transfer announced by `SidewispMiddleware`:

- `reduced` from the parent's applied update: the goto the tool really
  returned, `active_agent` before and after, the ToolMessage ids actually in
  the update, and the context key names present in the parent state after it;
- `destination` from the next parent-level `tasks` START (the only reliable
  "destination started" signal), with the task id as attempt id;

and, at the end of the stream, the run's outcome on its latest handoff: a
`wait` for each interrupt once `get_state` shows it persisted, the outcome
`verification`, and `final_status`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.utils import timezone
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.types import Interrupt

from agents import evidence
from agents.middleware import HANDOFF_EVENT, model_failure_reports
from receipts.models import Run
from receipts.recording import record

logger = logging.getLogger(__name__)

CONTROL_KEYS = frozenset({"messages", "active_agent"})


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


@dataclass
class _Tracker:
    operation_id: str
    values: dict[str, Any]
    announced: dict[str, dict] = field(default_factory=dict)  # parent node -> handoff announcement
    awaiting_start: list[str] = field(default_factory=list)  # handoff ids waiting for a destination

    def on_custom(self, ns: tuple[str, ...], chunk: Any) -> None:
        if isinstance(chunk, Mapping) and chunk.get("event") == HANDOFF_EVENT and ns:
            self.announced[_node_of(ns[0])] = dict(chunk)

    def on_update(self, node: str, update: Any) -> None:
        announcement = self.announced.pop(node, None)
        update = update if isinstance(update, Mapping) else {}
        before = self.values.get("active_agent")
        self.values.update({k: v for k, v in update.items() if k != "messages"})
        if announcement is None:
            return
        messages = update.get("messages") or []
        reduced = {
            "goto": announcement["goto"],
            "active_agent_before": before,
            "active_agent_after": self.values.get("active_agent"),
            "graph_scope": announcement["graph_scope"],
            "tool_message_ids": [m.tool_call_id for m in messages if isinstance(m, ToolMessage)],
            "context_keys": sorted(k for k, v in self.values.items() if k not in CONTROL_KEYS and v is not None),
            "at": evidence.now_iso(),
        }
        record(handoff_id=announcement["handoff_id"], operation_id=self.operation_id, part="reduced", value=reduced)
        self.awaiting_start.append(announcement["handoff_id"])

    def on_task_start(self, task: Mapping) -> None:
        # The first parent task scheduled after a transfer is where control really went.
        for handoff_id in self.awaiting_start:
            destination = {"node_id": task["name"], "started_at": evidence.now_iso(), "attempt_id": str(task["id"])}
            record(
                handoff_id=handoff_id,
                operation_id=self.operation_id,
                part="destination",
                value=destination,
                attempt=f"task-{task['id']}",
            )
        self.awaiting_start.clear()


def observe(
    graph: Any,
    graph_input: Any,
    config: dict,
    *,
    wait_policies: Mapping[str, WaitPolicy] | None = None,
    verifier: Verifier | None = None,
) -> Outcome:
    """Run `graph` to its end or its next wait, recording receipts; never raises for a failed run."""
    operation_id = evidence.operation_id_of(config)
    if operation_id is None:
        msg = "config needs configurable.operation_id or configurable.thread_id"
        raise ValueError(msg)
    values = dict(graph.get_state(config).values)
    if isinstance(graph_input, Mapping):
        values.update({k: v for k, v in graph_input.items() if k != "messages"})
    tracker = _Tracker(operation_id, values)
    if auto_continue_stopped(operation_id):
        return Outcome("parked")
    try:
        for ns, mode, chunk in graph.stream(
            graph_input, config, stream_mode=["updates", "tasks", "custom"], subgraphs=True, durability="sync"
        ):
            if not ns and mode == "tasks" and "input" in chunk and auto_continue_stopped(operation_id):
                # An operator stopped the run: leave the graph at its last checkpoint (durability
                # "sync") before the next step starts; resuming auto-continue drives it on from there.
                logger.info("run %s parked: auto-continue stopped", operation_id)
                return Outcome("parked")
            if mode == "custom":
                tracker.on_custom(ns, chunk)
            elif ns:
                continue
            elif mode == "updates":
                for node, update in chunk.items():
                    if node != "__interrupt__":
                        tracker.on_update(node, update)
            elif mode == "tasks" and "input" in chunk:
                tracker.on_task_start(chunk)
    except Exception as exc:  # noqa: BLE001 - a failing graph is an outcome to record, not a crash
        logger.warning("run %s failed: %s", operation_id, type(exc).__name__)
        _record_final(operation_id, "failed", "error")
        return Outcome("failed", error=type(exc).__name__)
    return conclude(graph, config, wait_policies=wait_policies, verifier=verifier)


def auto_continue_stopped(operation_id: str) -> bool:
    """True when an operator stopped auto-continue for the run (one indexed query)."""
    return Run.objects.filter(operation_id=operation_id, auto_continue=False).exists()


def conclude(
    graph: Any, config: dict, *, wait_policies: Mapping[str, WaitPolicy] | None = None, verifier: Verifier | None = None
) -> Outcome:
    """Record the outcome of the thread as its checkpoint shows it (idempotent)."""
    operation_id = evidence.operation_id_of(config) or ""
    wait_policies = wait_policies or {}
    snapshot = graph.get_state(config)
    if snapshot.interrupts:
        for pending in snapshot.interrupts:
            record_wait(operation_id, pending, wait_policies, persisted=True, resolved=False)
        _record_final(operation_id, "waiting", evidence.digest(*(i.id for i in snapshot.interrupts)))
        return Outcome("waiting", interrupts=list(snapshot.interrupts))
    if snapshot.next:
        # Halted before a node without an interrupt (e.g. a node held by interrupt_before).
        _record_final(operation_id, "running", f"held-{evidence.digest(*snapshot.next)}")
        return Outcome("parked")
    messages: list[BaseMessage] = snapshot.values.get("messages", [])
    last = messages[-1] if messages else None
    failures = model_failure_reports([last]) if last is not None else []
    if failures:
        agent = snapshot.values.get("active_agent") or getattr(last, "name", None) or "agent"
        evidence.add_report(operation_id, agent, *failures[0])
    if not isinstance(last, AIMessage) or last.tool_calls or failures:
        # No agent claimed completion (a transfer that led nowhere, or a dead model).
        _record_final(operation_id, "failed", "end")
        return Outcome("failed", error="NoCompletionClaim")
    if verifier is not None:
        verify(operation_id, verifier, attempt="end")
    _record_final(operation_id, "complete", "end")
    return Outcome("complete")


def verify(operation_id: str, verifier: Verifier, *, attempt: str) -> str | None:
    """Run the outcome verifier and record `verification` on the latest handoff; the result or None."""
    found = verifier(operation_id)
    if found is None:
        return None
    name, result, receipt_id = found
    value = {"verifier": name, "result": result, "checked_at": evidence.now_iso(), "receipt_id": receipt_id}
    evidence.record_outcome(operation_id, "verification", value, attempt=f"verify-{attempt}")
    return result


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
    evidence.record_outcome(operation_id, "wait", wait, attempt=f"{state}-{evidence.digest(pending.id)}")


def gated_tools(pending: Interrupt) -> list[str]:
    value = pending.value if isinstance(pending.value, Mapping) else {}
    return [str(request.get("name")) for request in value.get("action_requests", [])]


def _policy_for(pending: Interrupt, wait_policies: Mapping[str, WaitPolicy]) -> WaitPolicy:
    for name in gated_tools(pending):
        if name in wait_policies:
            return wait_policies[name]
    return WaitPolicy(owner=None, reason=None, deadline_minutes=None)


def _record_final(operation_id: str, status: str, attempt: str) -> None:
    evidence.record_outcome(operation_id, "final_status", status, attempt=f"{status}-{attempt}")


def _node_of(namespace: str) -> str:
    return namespace.split(":", 1)[0]
