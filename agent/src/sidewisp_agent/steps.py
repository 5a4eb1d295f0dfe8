"""Steps of one agent (spec v1.2): a tool that changes the step variable hands off between steps.

In the LangChain docs' single-agent handoffs pattern a tool returns
`Command(update={"current_step": "specialist", ...})` (no `graph=PARENT`) and a
`@wrap_model_call` middleware gives the next model call the step's prompt and
tools. When the agent's route version names its step variable (the contracts'
`steps` entry, or `SidewispMiddleware(step_key=...)` where there is no
database), `SidewispMiddleware` records each change of that variable as a
handoff from the old step (sender) to the new one (receiver):

- `created` when the tool returns, with the context keys the contract's route requires;
- `reduced` and `destination` at the agent's next model call, which proves both
  that the update was applied (the variable in the state that call sees, the
  ToolMessages the update carried, the state's key names) and what the step
  was given: the step the call ran under and the sorted names of the tools it
  was actually given. The middleware must be last in the list to see the
  request after the user's own middleware configured it.

A pending step handoff waits in a bounded in-process map keyed by (operation
id, the agent graph's checkpoint namespace) and is cleared when used. When no
model call follows (the run ends first), `reduced` and `destination` stay
missing: not proven, so their boundaries fail.

Recording never raises into the graph, and the model call never waits on a
database: the contracts are read at most once per CONTRACTS_TTL_SECONDS, and
only when a tool returned a `Command` with an update.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.config import get_config
from langgraph.types import Command

from . import bundle, evidence, store, writer
from . import entries as intake
from .transfers import context_key_names, scope_name, turn_call_ids

logger = logging.getLogger(__name__)

CONTRACTS_TTL_SECONDS = 10.0  # how stale a worker's view of the contracts' steps may be
MAX_PENDING = 1024  # step handoffs awaiting their next model call, per middleware instance


@dataclass(frozen=True)
class Pending:
    """A step change a tool made, waiting for the agent's next model call to prove it."""

    operation_id: str
    handoff_id: str
    key: str  # the step variable
    before: str | None
    goto: str
    tool_message_ids: tuple[str, ...]  # the ToolMessages of the update that answer the transfer's own call
    turn: tuple[str, ...] = ()  # the other calls of the AI turn that made it (spec v1.3 the whole turn)
    first: str | None = None  # the step while the variable is unset


class StepWatch:
    """One middleware's view of its agent's steps: the step variable, and the changes awaiting a model call.

    `step_key` names the variable outright (remote mode has no contracts to read);
    otherwise it is the `steps` key the contracts give `route_version`.
    `first_step` is the step the agent is in while the variable is unset (what the
    user's own middleware falls back to), so the first change has a sender; without it,
    the contracts' `first` for the version (spec v1.3).
    """

    def __init__(
        self,
        route_version: str,
        *,
        step_key: str | None = None,
        first_step: str | None = None,
        source: str = "middleware",
    ) -> None:
        for name, value in (("step_key", step_key), ("first_step", first_step)):
            if value is not None and (not isinstance(value, str) or not value or bundle.identifier_problem(value)):
                msg = f"{name} must be a non-empty name"
                raise ValueError(msg)
        self.route_version = route_version
        self.source = source  # where route_version came from (created.route_version_source)
        self.step_key = step_key
        self.first_step = first_step
        self._contracts: tuple[float, bundle.Contracts | None] | None = None
        self._pending: OrderedDict[tuple[str, str], list[Pending]] = OrderedDict()
        self._lock = threading.Lock()

    # --- the tool returned ---------------------------------------------------

    def after_tool(self, request: Any, result: Any) -> None:
        """Record `created` when the tool's Command changed the step variable; never raises."""
        if (update := _update_of(result)) is None:
            return
        config = _config()
        if (operation_id := evidence.operation_id_of(config)) is None:
            return
        contracts = evidence.guarded(operation_id, "created", self._read_contracts)
        evidence.guarded(operation_id, "created", partial(self._changed, request, update, config, contracts))

    async def aafter_tool(self, request: Any, result: Any) -> None:
        """`after_tool` for async tools: the contracts are read off the event loop."""
        if (update := _update_of(result)) is None:
            return
        config = _config()
        if (operation_id := evidence.operation_id_of(config)) is None:
            return
        fresh, contracts = self._cached_contracts()
        if not fresh:
            try:
                contracts = await evidence.arun_orm(self._read_contracts)
            except Exception as exc:  # noqa: BLE001 - recording must never raise into the user's graph
                logger.warning("contracts not read for steps: %s", type(exc).__name__)
                contracts = None
        evidence.guarded(operation_id, "created", partial(self._changed, request, update, config, contracts))

    def _changed(self, request: Any, update: Mapping, config: dict, contracts: bundle.Contracts | None) -> None:
        key = self.step_key or _contract_key(contracts, self.route_version)
        if key is None or key not in update:
            return
        first = self.first_step or _contract_first(contracts, self.route_version)
        before, goto = self._step_in(request.state, key, first), update[key]
        tool_call_id = request.tool_call.get("id")
        if not isinstance(goto, str) or not goto or goto == before or not tool_call_id:
            return
        operation_id = evidence.operation_id_of(config)
        handoff_id = evidence.handoff_id_for(operation_id, tool_call_id)
        required = contracts.required_keys(self.route_version, before, goto) if contracts else None
        created = {
            "sender": before,
            "receiver": goto,
            "route_version": self.route_version,
            "route_version_source": self.source,
            "tool_call_id": tool_call_id,
            "required_context_keys": list(required or ()),
            "at": evidence.now_iso(),
        }
        turn = turn_call_ids(_messages(request.state), tool_call_id)
        if turn is not None:
            created["turn_tool_call_ids"] = turn
        info = request.runtime.execution_info if request.runtime is not None else None
        evidence.submit_part(operation_id, handoff_id, "created", created, str(getattr(info, "node_attempt", 1) or 1))
        answered = _answering_ids(update, frozenset({tool_call_id}))
        others = tuple((turn or [])[1:])
        pending = Pending(operation_id, handoff_id, key, before, goto, answered, others, first)
        self._hold((operation_id, _agent_namespace(config)), pending)

    # --- the next model call ---------------------------------------------------

    def before_model(self, request: Any, tools: Iterable[str]) -> None:
        """Record `reduced` and `destination` of the step changes this model call proves; never raises.

        `tools` are the names of the tools the call was given. No database is touched.
        """
        if not self._pending:
            return
        config = _config()
        operation_id = evidence.operation_id_of(config)
        if operation_id is None:
            return
        namespace = _agent_namespace(config)
        with self._lock:
            waiting = self._pending.pop((operation_id, namespace), [])
        for pending in waiting:
            evidence.guarded(operation_id, "reduced", partial(self._proven, pending, request, tools, config, namespace))

    def _proven(self, pending: Pending, request: Any, tools: Iterable[str], config: dict, namespace: str) -> None:
        step = self._step_in(request.state, pending.key, pending.first)
        now = evidence.now_iso()
        # The turn's other calls are answered by their own tools' updates: proven by the history this call sees.
        others = set(pending.turn)
        history = [m.tool_call_id for m in _messages(request.state) if isinstance(m, ToolMessage)]
        answers = [*pending.tool_message_ids, *(call_id for call_id in history if call_id in others)]
        reduced = {
            "goto": pending.goto,
            "active_agent_before": pending.before,
            "active_agent_after": step,
            "graph_scope": graph_scope(namespace),
            "tool_message_ids": answers[: bundle.MAX_LIST_ENTRIES],
            "context_keys": context_key_names(request.state if isinstance(request.state, Mapping) else {}),
            "at": now,
        }
        attempt = f"model-{_task_id(config) or evidence.digest(now)}"
        destination = {
            "node_id": step,
            "started_at": now,
            "attempt_id": attempt,
            "tools": sorted(set(tools))[: bundle.MAX_LIST_ENTRIES],
        }
        evidence.submit_part(pending.operation_id, pending.handoff_id, "reduced", reduced, attempt)
        evidence.submit_part(pending.operation_id, pending.handoff_id, "destination", destination, attempt)
        writer.submit(intake.SettleEntry(pending.operation_id, pending.handoff_id))

    # --- helpers ---------------------------------------------------------------

    def _step_in(self, state: Any, key: str, first: str | None) -> str | None:
        value = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
        return value if isinstance(value, str) and value else first

    def _hold(self, where: tuple[str, str], pending: Pending) -> None:
        with self._lock:
            self._pending.setdefault(where, []).append(pending)
            self._pending.move_to_end(where)
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)  # a run that ended without its next model call

    def _cached_contracts(self) -> tuple[bool, bundle.Contracts | None]:
        """(True, the contracts or None when there are none to read) while fresh; (False, None) when due."""
        cached = self._contracts
        if cached is not None and time.monotonic() - cached[0] < CONTRACTS_TTL_SECONDS:
            return True, cached[1]
        return False, None

    def _read_contracts(self) -> bundle.Contracts | None:
        fresh, found = self._cached_contracts()
        if fresh:
            return found
        contracts = evidence.run_orm(store.current().contracts)  # none from a store elsewhere: the server's
        self._contracts = (time.monotonic(), contracts)
        return contracts


def graph_scope(namespace: str) -> str:
    """The agent graph's node path, task ids left out (`parent` at the root), as spec v1.2 names it."""
    return scope_name(tuple(segment for segment in namespace.split("|") if segment))


def _contract_key(contracts: bundle.Contracts | None, version: str) -> str | None:
    rules = contracts.steps.get(version) if contracts is not None else None
    return rules.key if rules is not None else None


def _contract_first(contracts: bundle.Contracts | None, version: str) -> str | None:
    rules = contracts.steps.get(version) if contracts is not None else None
    return rules.first if rules is not None else None


def _update_of(result: Any) -> Mapping | None:
    """The update of a Command to the agent's own graph, as a mapping; None for anything else."""
    if not isinstance(result, Command) or result.graph is not None:
        return None
    update = result.update
    if isinstance(update, Mapping):
        return update
    if isinstance(update, list | tuple) and all(isinstance(item, tuple) and len(item) == 2 for item in update):
        return dict(update)
    return None


def _messages(state: Any) -> list:
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(state, "messages", None)
    return list(messages) if isinstance(messages, list | tuple) else []


def _answering_ids(update: Mapping, turn: frozenset[str]) -> tuple[str, ...]:
    messages = update.get("messages")
    messages = messages if isinstance(messages, list | tuple) else [messages]
    ids = [m.tool_call_id for m in messages if isinstance(m, ToolMessage) and m.tool_call_id in turn]
    return tuple(ids[: bundle.MAX_LIST_ENTRIES])


def _namespace_segments(config: dict) -> list[str]:
    namespace = (config.get("metadata") or {}).get("langgraph_checkpoint_ns") or (config.get("configurable") or {}).get(
        "checkpoint_ns"
    )
    return [segment for segment in str(namespace or "").split("|") if segment]


def _agent_namespace(config: dict) -> str:
    """The namespace of the graph that runs this node (the node's own task left out); "" at the root."""
    return "|".join(_namespace_segments(config)[:-1])


def _task_id(config: dict) -> str | None:
    """The id of this node's own task (the model call's), or None outside a graph."""
    segments = _namespace_segments(config)
    if not segments:
        return None
    return segments[-1].partition(":")[2] or None


def _config() -> dict:
    try:
        return get_config()
    except RuntimeError:
        return {}
