"""What the graph did, read from its own stream: transfers at any depth, fan-out and ends (spec v1.2).

`Tracker` reads `graph.stream(..., stream_mode=STREAM_MODES, subgraphs=True)` and returns the
receipt entries to record. It is pure: every method returns entries, nothing is written here.

- A *transfer* is a tool call that returned a `Command` to the parent graph, whoever wrote the tool:
  the observer's tool events (`sidewisp_agent.toolevents`, given to the tracker as `tools` events)
  show the tool's output. `SidewispMiddleware`, where it is installed, announces the transfer too
  (custom stream) with the receiver the tool declares and the call's time, and has recorded
  `created` itself; without it the tracker records `created` (the receiver a tool declares in its
  metadata when the graph holds it, else the goto).
- The transfer is applied by the parent of the graph the tool ran in, at any depth: its *scope*,
  a namespace. `reduced` is read there: the sender node's `updates` event gives the update's
  messages; the scope's next `checkpoints` event (or, without a checkpointer, the tasks its next
  step starts) gives the state after it and what it scheduled. `graph_scope` names it.
- `destination` comes from the scope's next `tasks` START of each goto node, the task id as attempt.
- A goto list is one handoff per destination; a `Command` whose only goto is END is no handoff.
- A `SettleEntry` says nothing more is due for a handoff (spec v1.2 Settled): its destination
  started, the step that should have started it began without it, or the run ended.

`sidewisp_agent.reconcile` re-derives from the checkpoint history what a process that died lost, for a
run that resumes from its checkpoint (the observer asks it before the graph streams); every entry is
idempotent, so a part recorded twice is one part. The pure helpers of a transfer are in
`sidewisp_agent.transfers`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command, Interrupt

from . import bundle, evidence
from .entries import Entry, PartEntry, ReportEntry, SettleEntry
from .handoffs import handoff_target
from .kinds import ReportKind
from .transfers import (
    DEFAULT_ROUTE_VERSION,
    HANDOFF_EVENT,
    Namespace,
    Transfer,
    context_key_names,
    destination_entries,
    find_tool,
    graph_at,
    messages_in,
    node_of,
    node_transfer_calls,
    scope_name,
    sent_tool_message_ids,
    transfer_gotos,
    turn_call_ids,
    update_messages,
)

logger = logging.getLogger(__name__)

STREAM_MODES = ["updates", "tasks", "custom", "values", "checkpoints"]
_MAX_OPEN_CALLS = 1000


@dataclass
class Tracker:
    """Pairs the transfers a run makes with what each scope did with them; returns the entries to record."""

    operation_id: str
    graph: Any = None
    route_version: str = DEFAULT_ROUTE_VERSION
    checkpointed: bool = False
    route_version_source: str = "default"  # "observe" when observe(route_version=) named it
    state: dict[str, Any] = field(default_factory=dict)  # the root graph's latest state
    interrupts: list[Interrupt] = field(default_factory=list)
    _values: dict[Namespace, Mapping] = field(default_factory=dict)
    _tool_names: dict[str, str] = field(default_factory=dict)
    _pending: dict[tuple[Namespace, str], list[Transfer]] = field(default_factory=dict)  # (scope, sender)
    _applied: dict[Namespace, list[Transfer]] = field(default_factory=dict)
    _awaiting: dict[Namespace, list[tuple[str, str]]] = field(default_factory=dict)  # (handoff id, goto)
    _starts: dict[Namespace, list[tuple[str, str]]] = field(default_factory=dict)  # (node, task id)
    _next: dict[Namespace, list[str]] = field(default_factory=dict)  # what each scope's last checkpoint schedules
    _scopes: dict[str, Any] = field(default_factory=dict)  # scope name -> its graph (None: not found)
    _open: dict[Namespace, set[str]] = field(default_factory=dict)  # per subgraph run, its tasks not yet ended

    # --- the stream ------------------------------------------------------------------

    def on_event(self, ns: Namespace, mode: str, chunk: Any) -> list[Entry]:
        entries: list[Entry] = []
        start = mode == "tasks" and isinstance(chunk, Mapping) and "input" in chunk
        for scope in [s for s, starts in self._starts.items() if starts and (s != ns or not start)]:
            entries += self._end_of_starts(scope)
        if mode == "tools" and isinstance(chunk, Mapping):
            entries += self._on_tool(ns, chunk)
        elif mode == "custom" and isinstance(chunk, Mapping) and chunk.get("event") == HANDOFF_EVENT:
            self._on_announcement(ns, chunk)
        elif mode == "updates" and isinstance(chunk, Mapping):
            entries += self._on_updates(ns, chunk)
        elif mode == "values" and isinstance(chunk, Mapping):
            self._set_values(ns, chunk)
        elif mode == "checkpoints" and isinstance(chunk, Mapping):
            if isinstance(chunk.get("values"), Mapping):
                self._set_values(ns, chunk["values"])
            self._next[ns] = list(chunk.get("next") or ())
            entries += self._finalize(ns, self._next[ns])
        elif start:
            task = (str(chunk["name"]), str(chunk["id"]))
            self._starts.setdefault(ns, []).append(task)
            if ns:
                self._open.setdefault(ns, set()).add(task[1])
            entries += self._match(ns, [task])
        elif mode == "tasks" and isinstance(chunk, Mapping) and ns and ns in self._open:
            self._open[ns].discard(str(chunk.get("id")))
            if not self._open[ns]:
                del self._open[ns]
            if not chunk.get("error"):
                entries += self._apply(ns, str(chunk.get("name")), [])
        elif mode == "tasks" and isinstance(chunk, Mapping) and not chunk.get("error"):
            # A transfer whose update carried nothing (a lone Send) is applied when its task ends.
            entries += self._apply(ns, str(chunk.get("name")), [])
        return entries

    def on_end(self) -> list[Entry]:
        """The run's stream ended: what is left is applied as it stands and every handoff settles."""
        entries: list[Entry] = []
        for scope in [s for s, starts in self._starts.items() if starts]:
            entries += self._end_of_starts(scope)
        for (scope, sender), transfers in list(self._pending.items()):
            del self._pending[(scope, sender)]
            for transfer in transfers:  # called but never applied: no reduced, no destination
                entries += self.created_entries(transfer)
                entries += [SettleEntry(self.operation_id, hid) for hid in transfer.handoff_ids(self.operation_id)]
        for scope in list(self._applied):
            entries += self._finalize(scope, [])
        for scope, awaiting in self._awaiting.items():
            # A destination the graph still schedules (held by interrupt_before) is not yet due: unsettled.
            held = self._next.get(scope, ())
            entries += [SettleEntry(self.operation_id, handoff_id) for handoff_id, goto in awaiting if goto not in held]
        self._awaiting.clear()
        return entries

    def _set_values(self, ns: Namespace, values: Mapping) -> None:
        self._values[ns] = values
        if not ns:
            self.state = dict(values)

    def _on_tool(self, ns: Namespace, chunk: Mapping) -> list[Entry]:
        call_id, event = chunk.get("tool_call_id"), chunk.get("event")
        if not isinstance(call_id, str):
            return []
        if event == "tool-started":
            if len(self._tool_names) >= _MAX_OPEN_CALLS:
                self._tool_names.clear()  # calls that never ended (interrupted); their names are not needed
            self._tool_names[call_id] = str(chunk.get("tool_name") or "")
            return []
        name = self._tool_names.pop(call_id, None)
        output = chunk.get("output")
        if event != "tool-finished" or not ns or not isinstance(output, Command) or output.graph != Command.PARENT:
            return []
        gotos = transfer_gotos(output.goto)
        if not gotos:
            return []  # a Command to END only, or with no goto, ends the graph: no handoff (spec v1.2 Ends)
        transfer = Transfer(
            tool_call_id=call_id,
            sender=node_of(ns[-1]),
            scope=ns[:-1],
            tool_ns=ns,
            gotos=gotos[: bundle.MAX_LIST_ENTRIES],
            sent_ids=sent_tool_message_ids(output.goto),
            at=evidence.now_iso(),
            tool_name=name or None,
        )
        self._pending.setdefault((transfer.scope, transfer.sender), []).append(transfer)
        return []

    def _on_announcement(self, ns: Namespace, chunk: Mapping) -> None:
        """SidewispMiddleware's word on a transfer the `tools` stream showed: it recorded `created`."""
        call_id = chunk.get("tool_call_id")
        for transfer in self._pending.get((ns[:-1], node_of(ns[-1])) if ns else ((), ""), []):
            if transfer.tool_call_id == call_id:
                transfer.announced = True
                transfer.turn_ids = list(chunk.get("turn_ids") or ()) or None
                return

    def _on_updates(self, ns: Namespace, chunk: Mapping) -> list[Entry]:
        entries: list[Entry] = []
        for node, update in chunk.items():
            if node == "__interrupt__":
                if not ns:
                    self.interrupts.extend(i for i in update or () if isinstance(i, Interrupt))
                    # Nothing more is scheduled in this run: what was applied is final as it stands.
                    for scope in list(self._applied):
                        entries += self._finalize(scope, [])
            else:
                messages = update_messages(update)
                left = self._left_by_command(ns, str(node))
                if (ns, str(node)) not in self._pending:
                    self._node_transfer(ns, str(node), messages, left)
                entries += self._apply(ns, str(node), messages)
        return entries

    def _left_by_command(self, ns: Namespace, node: str) -> list[Namespace]:
        """The runs of subgraph node `node` of `ns` with a task that never ended: one left them by a Command."""
        inner = [k for k in self._open if k[:-1] == ns and len(k) == len(ns) + 1 and node_of(k[-1]) == node]
        return [k for k in inner if self._open.pop(k)]

    def _node_transfer(self, ns: Namespace, node: str, messages: list, left: list[Namespace]) -> None:
        """A hand-written agent node that answers its own `transfer_to_<node>` call and returns `Command(goto=...)`.

        The LangGraph docs' network pattern: no tool runs, so the `tools` stream shows nothing; the
        update's last AI turn names the transfer and carries its ToolMessage. Only a call named
        `transfer_to_<X>` that the same update answers, X a node of this graph, counts: any other
        node update is not a transfer (a call a ToolNode answers later is that tool's own business).
        The same node inside a subgraph returns `Command(graph=PARENT, goto=...)` (spec v1.3): its
        task there started and never ended, and this graph applied what it returned as the subgraph
        node's update; that Command proves the transfer, so its call counts answered or not.
        """
        if self._graph_at((*ns, node)) is not None and not left:
            return  # a subgraph that ended, or whose tool transferred (the `tools` stream shows those)
        nodes = getattr(self._graph_at(ns), "nodes", None) or {}
        turn, calls = node_transfer_calls(messages, nodes, proven=bool(left))
        for call in calls:
            transfer = Transfer(
                tool_call_id=call["id"],
                sender=node,
                scope=ns,
                tool_ns=left[0] if left else (*ns, node),
                gotos=[str(call["name"]).removeprefix("transfer_to_")],
                sent_ids=[[]],
                at=evidence.now_iso(),
                tool_name=str(call["name"]),
                turn_ids=turn_call_ids([turn], call["id"]),
            )
            self._pending.setdefault((ns, node), []).append(transfer)

    def _apply(self, ns: Namespace, node: str, messages: list) -> list[Entry]:
        entries: list[Entry] = []
        for transfer in self._pending.pop((ns, node), []):
            transfer.messages = messages
            self._applied.setdefault(ns, []).append(transfer)
            entries += self.created_entries(transfer) + self.unseen_report(transfer)
        return entries

    def created_entries(self, transfer: Transfer) -> list[PartEntry]:
        if transfer.announced:
            return []
        declared = self._declared(transfer)
        turn = transfer.turn_ids or self._found_turn(transfer)
        entries: list[PartEntry] = []
        for goto, handoff_id in zip(transfer.gotos, transfer.handoff_ids(self.operation_id), strict=True):
            receiver = declared["to"] if declared and len(transfer.gotos) == 1 else goto
            created = {
                "sender": transfer.sender,
                "receiver": receiver,
                "route_version": self.route_version,
                "route_version_source": self.route_version_source,
                "tool_call_id": transfer.tool_call_id,
                "required_context_keys": list(declared["context_keys"]) if declared else [],
                "at": transfer.at,
            }
            if turn is not None:
                created["turn_tool_call_ids"] = list(turn)
            entries.append(PartEntry(self.operation_id, handoff_id, "created", created, "stream"))
        return entries

    def unseen_report(self, transfer: Transfer) -> list[ReportEntry]:
        """Once per agent: its transfers are proven from the stream, but what only the middleware sees is not."""
        if transfer.announced:
            return []
        detail = {"agent": transfer.sender}
        kind = ReportKind.UNSEEN_WITHOUT_MIDDLEWARE
        return [ReportEntry(self.operation_id, transfer.sender, kind, detail, f"unseen-{transfer.sender}")]

    def _finalize(self, ns: Namespace, scheduled: list[str]) -> list[Entry]:
        """`reduced` for each transfer `ns` applied, now that its state after the step is known."""
        entries: list[Entry] = []
        state = self._values.get(ns) or {}
        for transfer in self._applied.pop(ns, []):
            for handoff_id, goto, reduced in self.reduced_parts(transfer, scheduled, state):
                entries.append(PartEntry(self.operation_id, handoff_id, "reduced", reduced))
                self.await_destination(ns, handoff_id, goto)
        return entries

    def reduced_parts(
        self, transfer: Transfer, scheduled: list[str], state: Mapping[str, Any], at: str | None = None
    ) -> list[tuple[str, str, dict]]:
        """(handoff id, goto, reduced) per destination of an applied `transfer`, given the scope's state after it."""
        turn = set(transfer.turn_ids or self._turn_of(transfer))
        in_update = [m.tool_call_id for m in transfer.messages if isinstance(m, ToolMessage)]
        in_update = [call_id for call_id in in_update if call_id in turn]
        parts = []
        handoff_ids = transfer.handoff_ids(self.operation_id)
        for goto, sent, handoff_id in zip(transfer.gotos, transfer.sent_ids, handoff_ids, strict=False):
            ids = list(in_update)
            if transfer.tool_call_id not in ids and transfer.tool_call_id in sent and goto in scheduled:
                ids.append(transfer.tool_call_id)  # the Send carries the ToolMessage to the node it starts
            ids.sort(key=lambda i: i != transfer.tool_call_id)
            reduced = {
                "goto": goto,
                "active_agent_before": transfer.sender,
                "active_agent_after": self._after(transfer.scope, goto, scheduled, state),
                "graph_scope": scope_name(transfer.scope),
                "tool_message_ids": ids[: bundle.MAX_LIST_ENTRIES],
                "context_keys": context_key_names(state),
                "at": at or evidence.now_iso(),
            }
            parts.append((handoff_id, goto, reduced))
        return parts

    def _turn_of(self, transfer: Transfer) -> list[str]:
        return self._found_turn(transfer) or [transfer.tool_call_id]

    def _found_turn(self, transfer: Transfer) -> list[str] | None:
        """The call ids of the AI turn that made `transfer` (its own first), from its update or its graph's state."""
        sources = (transfer.messages, messages_in(self._values.get(transfer.tool_ns) or {}))
        for messages in sources:
            if (turn := turn_call_ids(messages, transfer.tool_call_id)) is not None:
                return turn
        return None

    def _after(self, ns: Namespace, goto: str, scheduled: list[str], state: Mapping[str, Any]) -> str | None:
        if self._has_active_agent(ns, state):
            after = state.get("active_agent")
            return after if isinstance(after, str) else None
        if goto in scheduled:
            return goto
        return ",".join(scheduled)[: bundle.MAX_STRING_LENGTH] or None

    def _end_of_starts(self, ns: Namespace) -> list[Entry]:
        entries: list[Entry] = []
        starts = self._starts.pop(ns, [])
        if not self.checkpointed:
            # Without a checkpointer there is no `next`: the tasks this step started are what was scheduled.
            entries += self._finalize(ns, [name for name, _ in starts])
            entries += self._match(ns, starts)
        # A destination not started in the step after its transfer did not start: settled as it is.
        entries += [SettleEntry(self.operation_id, handoff_id) for handoff_id, _ in self._awaiting.pop(ns, [])]
        return entries

    def _match(self, ns: Namespace, tasks: Iterable[tuple[str, str]]) -> list[Entry]:
        """`destination` for each awaited handoff of `ns` whose goto node is one of `tasks` (each task once)."""
        entries: list[Entry] = []
        awaiting = self._awaiting.get(ns, [])
        for name, task_id in tasks:
            item = next((item for item in awaiting if item[1] == name), None)
            if item is not None:
                awaiting.remove(item)
                entries += destination_entries(self.operation_id, item[0], name, task_id, evidence.now_iso())
        return entries

    def expect(self, transfer: Transfer) -> None:
        """Pair `transfer` with its sender's next update in its scope (a resumed run's step in flight)."""
        self._pending.setdefault((transfer.scope, transfer.sender), []).append(transfer)

    def await_destination(self, ns: Namespace, handoff_id: str, goto: str) -> None:
        """Expect `goto` to start in `ns`'s next step for `handoff_id` (a resumed run's pending destination)."""
        self._awaiting.setdefault(ns, []).append((handoff_id, goto))

    # --- the graph's own shape ------------------------------------------------------------

    def _has_active_agent(self, ns: Namespace, state: Mapping[str, Any]) -> bool:
        graph = self._graph_at(ns)
        channels = getattr(graph, "channels", None)
        return "active_agent" in channels if isinstance(channels, Mapping) else "active_agent" in state

    def _graph_at(self, ns: Namespace) -> Any:
        name = scope_name(ns)
        if name not in self._scopes:
            self._scopes[name] = graph_at(self.graph, [node_of(segment) for segment in ns])
        return self._scopes[name]

    def _declared(self, transfer: Transfer) -> dict | None:
        if not transfer.tool_name:
            return None
        tool = find_tool(self._graph_at(transfer.tool_ns), transfer.tool_name)
        return handoff_target(tool) if tool is not None else None


def tracker_for(graph: Any, operation_id: str, route_version: str | None = None) -> Tracker:
    checkpointed = isinstance(getattr(graph, "checkpointer", None), BaseCheckpointSaver)
    tracker = Tracker(operation_id, graph, route_version or DEFAULT_ROUTE_VERSION, checkpointed)
    tracker.route_version_source = "observe" if route_version else "default"
    return tracker


def stream_options(tracker: Tracker) -> dict[str, Any]:
    options: dict[str, Any] = {"stream_mode": list(STREAM_MODES), "subgraphs": True}
    if tracker.checkpointed:
        # Each step is saved before the next starts, so a parked or crashed run resumes from it.
        # (LangGraph 1.2 fails at the end of a run given a durability without a checkpointer.)
        options["durability"] = "sync"
    return options
