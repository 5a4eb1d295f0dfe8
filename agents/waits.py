"""What an approval wait is waiting for, read from the durable graph, and what happens when it expires.

`pending_call` answers the confirmation page's question "which tool call resumes,
with which argument names" from the run's checkpoint (names and types only: a
value never leaves this module). `escalation_for` reads the run's approval
settings (its pinned limits version) to decide what the deadline sweep does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.checkpoints import checkpointer
from agents.limits import DEFAULT_SETTINGS, resolve
from agents.models import LimitsVersion, RunLimits
from agents.observer import gated_tools, resume_token_id
from agents.runner import graph_config
from agents.scenarios import SCENARIOS
from receipts.models import Handoff, Run

# Used when a run has no approval settings to read (an imported run, a missing version).
DEFAULT_DEADLINE_MINUTES = int(DEFAULT_SETTINGS["approval"]["deadline_minutes"])
SAFE_DEFAULT = "reject"


@dataclass(frozen=True)
class PendingCall:
    """The tool call a decision resumes. `arg_types` maps argument names to type names, never values."""

    tool: str
    arg_types: dict[str, str]
    allowed_decisions: tuple[str, ...]
    resume_token_id: str

    @property
    def arg_keys(self) -> list[str]:
        return sorted(self.arg_types)


@dataclass(frozen=True)
class Escalation:
    backup_owner: str | None
    deadline_minutes: int
    safe_default: str = SAFE_DEFAULT


def pending_call(run: Run) -> PendingCall | None:
    """The run's one pending approval as its checkpoint holds it, or None (no graph, nothing pending)."""
    scenario = SCENARIOS.get(run.scenario)
    if scenario is None:
        return None
    with checkpointer() as saver:
        team = scenario.build(saver, version=_version_of(run))
        interrupts = list(team.graph.get_state(graph_config(run)).interrupts)
    if len(interrupts) != 1:
        return None
    (pending,) = interrupts
    value = pending.value if isinstance(pending.value, Mapping) else {}
    requests = value.get("action_requests", [])
    args: dict[str, Any] = requests[0].get("args", {}) if len(requests) == 1 else {}
    allowed: set[str] = set()
    for review in value.get("review_configs", []):
        allowed |= set(review.get("allowed_decisions", ()))
    tools = gated_tools(pending)
    return PendingCall(
        tool=", ".join(tools),
        arg_types={str(k): type(v).__name__ for k, v in args.items()},
        allowed_decisions=tuple(d for d in ("approve", "reject", "edit") if d in allowed),
        resume_token_id=resume_token_id(run.operation_id, pending.id),
    )


def escalation_for(handoff: Handoff) -> Escalation:
    """What the deadline sweep does with this wait: escalate to a backup owner, or the safe default.

    Reads the approval settings of the agent that waits (the handoff's receiver)
    from the run's pinned limits version with its scenario's overrides. A backup
    owner is used only when `on_expiry` is "escalate"; otherwise (and for runs
    without settings) there is none and the safe default (reject) applies.
    """
    approval = _approval_settings(handoff)
    minutes = approval.get("deadline_minutes")
    minutes = minutes if isinstance(minutes, int) and minutes > 0 else DEFAULT_DEADLINE_MINUTES
    backup = approval.get("backup_owner") or None
    if approval.get("on_expiry") != "escalate":
        backup = None
    return Escalation(backup_owner=backup, deadline_minutes=minutes)


def _approval_settings(handoff: Handoff) -> Mapping[str, Any]:
    run = handoff.run
    scenario = SCENARIOS.get(run.scenario)
    if scenario is None or not handoff.receiver:
        return {}
    version = _version_of(run) or LimitsVersion.current()
    settings = resolve(version.document, handoff.receiver, scenario.limits.get(handoff.receiver))
    approval = settings.get("approval")
    return approval if isinstance(approval, Mapping) else {}


def _version_of(run: Run) -> LimitsVersion | None:
    # Read, never pin: looking at a run must not choose its limits.
    pin = RunLimits.objects.select_related("version").filter(run=run).first()
    return pin.version if pin is not None else None
