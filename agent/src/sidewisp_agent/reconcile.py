"""Evidence a crashed process lost, re-derived from the checkpoint history when its run resumes.

A worker that dies after LangGraph saved a step (`durability="sync"`) but before the evidence
writer stored that step's receipts leaves a run whose checkpoint has moved past a transfer while
its handoff lacks `created`, `reduced` or `destination`. The redelivered task resumes the graph
from the checkpoint, so the live stream never shows that step again.

Before a resumed run streams, the observer reads the history of every scope (the root graph and
each subgraph node, by namespace, newest `MAX_STEPS` checkpoints each) and derives, for each
transfer the history shows, the parts the database lacks, with the tracker's own functions:

- a transfer is a subgraph task the parent moved past while the subgraph itself stopped mid-step
  (a `Command(graph=PARENT)` ends it there) after an AI turn whose call is a known handoff, a tool
  that declares a receiver, or a call the update or a `Send` answers with a ToolMessage;
- its gotos, its update's messages and the state after come from the parent's pending writes of
  that step and its next checkpoint. LangGraph saves a task's writes and the next checkpoint on two
  background threads and `durability="sync"` waits only for the checkpoint, so a process killed just
  after it (as the observer hands the transfer's `reduced` to the writer) can leave a step with no
  writes of the transferring task before a checkpoint that applied them: the transfer is then read
  from that checkpoint (`_lost_writes`: the receiver it schedules, the messages it gained);
- its destination started when the next step ran (a later checkpoint); when that step is the one
  the resumed run is about to run, the tracker awaits it in the live stream.

Entries carry the live path's attempt keys, so a part recorded twice is one part. Only local runs
with a checkpointer are reconciled (a store elsewhere, `store.remote`, keeps no parts to compare with here).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.constants import END, TASKS
from langgraph.pregel import Pregel
from langgraph.types import Send

from . import evidence, store
from .entries import Entry, PartEntry, SettleEntry
from .handoffs import handoff_target
from .tracking import Tracker
from .transfers import (
    Namespace,
    Transfer,
    destination_entries,
    find_tool,
    graph_at,
    messages_in,
    node_of,
    sent_tool_message_ids,
    turn_call_ids,
)

logger = logging.getLogger(__name__)

MAX_STEPS = 200  # checkpoints read per namespace, newest first
MAX_SCOPES = 50  # namespaces read per run
BRANCH = "branch:to:"
PARTS = ("created", "reduced", "destination")


@dataclass
class Step:
    """One checkpoint of a namespace: what it held, what it scheduled and the writes its tasks made."""

    created_at: str
    values: Mapping[str, Any]
    next: tuple[str, ...]
    tasks: list[tuple[str, str]]  # (node, task id)
    writes: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)  # task id -> (channel, value)


def entries(tracker: Tracker, graph: Any, config: dict) -> list[Entry]:
    """The entries a crash lost for this thread's run (and the destinations to await); [] when none can be."""
    if not tracker.checkpointed or store.remote() or not isinstance(graph, Pregel):
        return []
    try:
        snapshot = graph.get_state(config)
        if not snapshot.values:
            return []  # a new thread: nothing happened before
        known = evidence.run_orm(store.current().known_parts, tracker.operation_id)
        stopped_midway = bool(snapshot.next or snapshot.tasks) and not snapshot.interrupts
        incomplete = any(not set(PARTS) <= parts for parts in known.values())
        if not (stopped_midway or incomplete):
            return []
        return derive(tracker, histories(graph, config), known)
    except Exception:  # noqa: BLE001 - observation never breaks the observed graph
        logger.warning("run %s: evidence not reconciled from the checkpoint history", tracker.operation_id)
        return []


async def aentries(tracker: Tracker, graph: Any, config: dict) -> list[Entry]:
    """`entries` off the event loop (async checkpointers answer synchronous calls from another thread)."""
    return await asyncio.to_thread(entries, tracker, graph, config)


def histories(graph: Pregel, config: dict) -> dict[Namespace, list[Step]]:
    """Each scope's steps, oldest first: the root graph and every subgraph task its history shows."""
    thread_id = (config.get("configurable") or {}).get("thread_id")
    found: dict[Namespace, list[Step]] = {}
    todo: list[Namespace] = [()]
    while todo and len(found) < MAX_SCOPES:
        ns = todo.pop(0)
        found[ns] = steps = _steps(graph, {"configurable": {"thread_id": thread_id, "checkpoint_ns": "|".join(ns)}})
        nodes = [node_of(segment) for segment in ns]
        for step in steps:
            for name, task_id in step.tasks:
                child = (*ns, f"{name}:{task_id}")
                if child not in found and child not in todo and isinstance(graph_at(graph, [*nodes, name]), Pregel):
                    todo.append(child)
    return found


def _steps(graph: Pregel, config: dict) -> list[Step]:
    writes = {
        item.config["configurable"]["checkpoint_id"]: item.pending_writes or []
        for item in graph.checkpointer.list(config, limit=MAX_STEPS)
    }
    steps = []
    for snapshot in graph.get_state_history(config, limit=MAX_STEPS):
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in writes.get(snapshot.config["configurable"]["checkpoint_id"], []):
            by_task.setdefault(task_id, []).append((channel, value))
        tasks = [(task.name, task.id) for task in snapshot.tasks]
        steps.append(Step(str(snapshot.created_at or ""), snapshot.values or {}, tuple(snapshot.next), tasks, by_task))
    return steps[::-1]


def derive(tracker: Tracker, found: dict[Namespace, list[Step]], known: dict[str, set[str]]) -> list[Entry]:
    """The missing parts of every transfer in `found`; destinations due in the resumed step are awaited."""
    out: list[Entry] = []
    for ns, steps in found.items():
        for k, step in enumerate(steps):
            for name, task_id in step.tasks:
                child = found.get((*ns, f"{name}:{task_id}"))
                if not child or not child[-1].next:
                    continue  # not a subgraph, or one that ended on its own: no transfer left it
                writes = step.writes.get(task_id) or []
                if not writes and k + 1 < len(steps):
                    writes = _lost_writes(tracker, ns, name, task_id, child[-1], step, steps[k + 1], known)
                for transfer in _transfers(tracker, ns, name, task_id, child[-1], writes, known):
                    if k + 1 < len(steps):
                        out += _missing(tracker, transfer, steps, k, known)
                    else:
                        # Its writes were saved, the step's checkpoint was not: the resumed stream applies them.
                        transfer.announced = "created" in known.get(transfer.handoff_ids(tracker.operation_id)[0], ())
                        tracker.expect(transfer)
    return out


def _transfers(
    tracker: Tracker, ns: Namespace, name: str, task_id: str, last: Step, writes: list, known: dict[str, set[str]]
) -> list[Transfer]:
    branches = [channel[len(BRANCH) :] for channel, _ in writes if channel.startswith(BRANCH)]
    branches = [goto for goto in branches if goto != END]
    sends = [value for channel, value in writes if channel == TASKS and isinstance(value, Send) and value.node != END]
    gotos = [*branches, *(str(send.node) for send in sends)]
    if not gotos:
        return []
    messages = [m for channel, value in writes if channel == "messages" for m in _as_list(value)]
    carried = [*messages, *(m for send in sends for m in messages_in(send.arg))]
    answered = {m.tool_call_id for m in carried if isinstance(m, ToolMessage)}
    tool_ns = (*ns, f"{name}:{task_id}")
    agent = graph_at(tracker.graph, [node_of(segment) for segment in tool_ns])
    turn = next((m for m in reversed(messages_in(last.values)) if isinstance(m, AIMessage) and m.tool_calls), None)
    calls = [call for call in (turn.tool_calls if turn else ()) if call.get("id")]

    def is_transfer(call: dict) -> bool:
        tool = find_tool(agent, str(call.get("name")))
        declared = tool is not None and handoff_target(tool) is not None
        return call["id"] in answered or declared or evidence.handoff_id_for(tracker.operation_id, call["id"]) in known

    chosen = [call for call in calls if is_transfer(call)]
    # Two transfers in one turn: one wins (the one whose ToolMessage the update carries); the other was not applied.
    chosen = [call for call in chosen if call["id"] in answered][:1] or chosen[:1]
    return [
        Transfer(
            tool_call_id=call["id"],
            sender=name,
            scope=ns,
            tool_ns=tool_ns,
            gotos=gotos,
            sent_ids=[*([] for _ in branches), *sent_tool_message_ids(sends)],
            at=last.created_at,
            tool_name=str(call.get("name")),
            turn_ids=turn_call_ids(messages_in(last.values), call["id"]),
            messages=messages,
        )
        for call in chosen
    ]


def _lost_writes(
    tracker: Tracker, ns: Namespace, name: str, task_id: str, last: Step, step: Step, after: Step, known: dict
) -> list[tuple[str, Any]]:
    """The writes a transferring task made in `step` when they were not saved but the checkpoint after it was:
    the branch to its receiver and the messages the step added (its update's).

    The receiver is the one a called tool declares, when `after` schedules it; else, for a call whose
    `created` is stored (the middleware saw it return a transfer) and whose ToolMessage the step added,
    the one node `after` schedules. Anything else is not guessed.
    """
    agent = graph_at(tracker.graph, [node_of(segment) for segment in (*ns, f"{name}:{task_id}")])
    turn = next((m for m in reversed(messages_in(last.values)) if isinstance(m, AIMessage) and m.tool_calls), None)
    scheduled = list(dict.fromkeys([*after.next, *(node for node, _ in after.tasks)]))
    before = {getattr(m, "id", None) for m in messages_in(step.values)}
    gained = [m for m in messages_in(after.values) if getattr(m, "id", None) not in before]
    answered = {m.tool_call_id for m in gained if isinstance(m, ToolMessage)}
    targets = []
    for call in turn.tool_calls if turn is not None else ():
        tool = find_tool(agent, str(call.get("name")))
        target = (handoff_target(tool) or {}).get("to") if tool is not None else None
        created = "created" in known.get(evidence.handoff_id_for(tracker.operation_id, str(call.get("id"))), ())
        if target is None and created and call.get("id") in answered and len(scheduled) == 1:
            target = scheduled[0]
        if target is not None and target in scheduled and target not in targets:
            targets.append(target)
    if len(targets) != 1:
        return []  # none, or more than one the step could have taken
    return [(f"{BRANCH}{targets[0]}", None), *(("messages", m) for m in gained)]


def _missing(
    tracker: Tracker, transfer: Transfer, steps: list[Step], k: int, known: dict[str, set[str]]
) -> list[Entry]:
    out: list[Entry] = []
    after = steps[k + 1]
    out += [entry for entry in tracker.created_entries(transfer) if "created" not in known.get(entry.handoff_id, ())]
    started = list(after.tasks)
    for handoff_id, goto, reduced in tracker.reduced_parts(transfer, list(after.next), after.values, after.created_at):
        parts = known.get(handoff_id, set())
        if "reduced" not in parts:
            out.append(PartEntry(tracker.operation_id, handoff_id, "reduced", reduced))
        if "destination" in parts:
            out.append(SettleEntry(tracker.operation_id, handoff_id))
            continue
        task = next((task for task in started if task[0] == goto), None)
        if task is None:
            out.append(SettleEntry(tracker.operation_id, handoff_id))  # never scheduled: nothing more is due
        elif k + 2 < len(steps):
            started.remove(task)  # the step after it ran: the destination started then
            out += destination_entries(tracker.operation_id, handoff_id, goto, task[1], after.created_at)
        else:
            started.remove(task)
            tracker.await_destination(transfer.scope, handoff_id, goto)  # the resumed stream starts it
    return out


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]
