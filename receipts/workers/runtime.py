"""What the evidence domain needs from the agent runtime, behind one narrow interface.

`receipts` never imports agent code: the runtime (agents.host.hosting) registers an
implementation when Django starts. Until one is registered, nothing can be
resumed, verified again or driven, which is the fail-closed answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from receipts.models import Handoff, Run

SAFE_DEFAULT = "reject"
DEFAULT_DEADLINE_MINUTES = 60


@dataclass(frozen=True)
class PendingCall:
    """The tool call a decision resumes. `arg_types` maps argument names to type names, never values.

    `arg_schema` is each argument's JSON schema (type and declared range, receipts.actions.arguments), what an
    edit is checked against. `arg_values` are the call's values, redacted, read from the durable checkpoint
    for the confirmation page only (None when Sidewisp cannot read them, `values_note` says why): never
    stored, audited or sent.
    """

    tool: str
    arg_types: dict[str, str]
    allowed_decisions: tuple[str, ...]
    resume_token_id: str
    arg_schema: dict[str, dict] = field(default_factory=dict)
    arg_values: dict[str, str] | None = None
    values_note: str = ""

    @property
    def arg_keys(self) -> list[str]:
        return sorted(self.arg_types)


@dataclass(frozen=True)
class Escalation:
    backup_owner: str | None
    deadline_minutes: int
    safe_default: str = SAFE_DEFAULT


def stored_pending_call(value: object, *, values_note: str = "") -> PendingCall | None:
    """`Run.pending_call` as the writer stored it when the run began to wait (names and type names only), or None.

    Every run that waits stores it, hosted or observed (`sidewisp_agent.conclusion.conclude_run`), so a list of
    waits reads a run's gated call from its row instead of asking the runtime to read a checkpoint.
    """
    if not isinstance(value, Mapping) or not value.get("tool") or not value.get("resume_token_id"):
        return None
    arg_types = value.get("arg_types") if isinstance(value.get("arg_types"), Mapping) else {}
    schema = value.get("arg_schema") if isinstance(value.get("arg_schema"), Mapping) else {}
    allowed = value.get("allowed_decisions") or ()
    return PendingCall(
        tool=str(value["tool"]),
        arg_types={str(k): str(v) for k, v in arg_types.items()},
        allowed_decisions=tuple(d for d in ("approve", "reject", "edit") if d in allowed),
        resume_token_id=str(value["resume_token_id"]),
        arg_schema={str(k): dict(v) for k, v in schema.items() if isinstance(v, Mapping)},
        values_note=values_note,
    )


class Runtime(Protocol):
    def graphs(self) -> list[str]:
        """The names of the registered graphs a hosted run can start."""

    def can_resume(self, run: Run) -> bool:
        """A decision on this run's wait can reach its graph (a hosted graph, or an observing app)."""

    def can_reverify(self, run: Run) -> bool:
        """A worker can run this run's outcome verifier again."""

    def can_drive(self, run: Run) -> bool:
        """A worker can drive this run on from its checkpoint (resume auto-continue)."""

    def can_reopen(self, run: Run) -> bool:
        """A reopened task can reach this run's graph: its destination works again, then it is verified."""

    def reopener(self, run: Run) -> str:
        """Who gives a reopened task back to its agent, as a sentence for the pages."""

    def resumer(self, run: Run) -> str:
        """Who resumes this run after a decision, as a sentence for the pages."""

    def pending_call(self, run: Run) -> PendingCall | None: ...

    def escalation_for(self, handoff: Handoff) -> Escalation: ...

    def enqueue_start(self, run_id: int) -> None: ...

    def enqueue_resume(self, decision_id: int) -> None: ...

    def enqueue_reverify(self, run_id: int) -> None: ...


class NoRuntime:
    """No agent runtime installed: evidence can be read and judged, nothing can be driven."""

    def graphs(self) -> list[str]:
        return []

    def can_resume(self, run: Run) -> bool:
        return False

    def can_reverify(self, run: Run) -> bool:
        return False

    def can_drive(self, run: Run) -> bool:
        return False

    def can_reopen(self, run: Run) -> bool:
        return False

    def reopener(self, run: Run) -> str:
        return "no agent runtime is installed."

    def resumer(self, run: Run) -> str:
        return "Nothing resumes this run: no agent runtime is installed."

    def pending_call(self, run: Run) -> PendingCall | None:
        return None

    def escalation_for(self, handoff: Handoff) -> Escalation:
        return Escalation(backup_owner=None, deadline_minutes=DEFAULT_DEADLINE_MINUTES)

    def enqueue_start(self, run_id: int) -> None:
        raise LookupError("no agent runtime is installed")

    enqueue_resume = enqueue_reverify = enqueue_start


_runtime: Runtime = NoRuntime()


def register(runtime: Runtime) -> None:
    global _runtime
    _runtime = runtime


def current() -> Runtime:
    return _runtime
