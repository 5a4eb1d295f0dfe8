"""What a hosted run's approval wait is waiting for, read from the durable graph, and what happens when it expires.

`pending_call` answers the confirmation page's question "which tool call resumes,
with which arguments" from the run's checkpoint at request time: the argument
names and types, the tool's argument schema (for validating an edit), and the
values redacted by the waiting agent's shell redaction rules plus an
absolute-path rule (`sidewisp_agent.arguments.redacted_values`). The values exist only
in the returned object, for the page of someone who may decide the wait: never
stored, audited or sent in an event. `escalation_for` reads the run's approval
settings (its pinned limits version) to decide what the deadline sweep does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidewisp_agent.arguments import arg_schemas, redacted_values
from sidewisp_agent.waits import gated_tools, resume_token_id

from agents.host import registry
from agents.limits import DEFAULT_SETTINGS, graph_limits, resolve
from agents.models import LimitsVersion, RunLimits
from receipts.models import Handoff, Run
from receipts.workers.runtime import Escalation, PendingCall

# Used when a run has no approval settings to read (an imported run, a missing version).
DEFAULT_DEADLINE_MINUTES = int(DEFAULT_SETTINGS["approval"]["deadline_minutes"])


def pending_call(run: Run) -> PendingCall | None:
    """The run's one pending approval as its checkpoint holds it, or None (no graph, nothing pending)."""
    from agents.host import runner

    if run.mode != Run.Mode.HOSTED or run.graph not in registry.graphs():
        return None
    with runner.built(run, _version_of(run), reading=True) as hosted:
        interrupts = list(hosted.graph.get_state(runner.graph_config(run)).interrupts)
        schemas = arg_schemas(hosted.graph, [name for pending in interrupts for name in gated_tools(pending)])
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
    schema = schemas.get(tools[0], {}) if len(tools) == 1 else {}
    return PendingCall(
        tool=", ".join(tools),
        arg_types={str(k): type(v).__name__ for k, v in args.items()},
        allowed_decisions=tuple(d for d in ("approve", "reject", "edit") if d in allowed),
        resume_token_id=resume_token_id(run.operation_id, pending.id),
        arg_schema={str(k): dict(v) for k, v in schema.items() if k in args},
        arg_values=redacted_values(args, redaction_rules(run)) if len(requests) == 1 else None,
        values_note="" if len(requests) == 1 else "Several calls wait together; their values are not shown.",
    )


def redaction_rules(run: Run) -> list[Mapping[str, Any]]:
    """The shell redaction rules of the agent whose wait is open (its pinned limits), with the defaults."""
    rules = list(DEFAULT_SETTINGS["shell"]["redaction"])
    handoff = run.handoffs.filter(wait_open=True).order_by("created_at", "pk").last()
    if handoff is not None and handoff.receiver:
        version = _version_of(run) or LimitsVersion.current()
        settings = resolve(
            version.document, handoff.receiver, _overrides(run, handoff.receiver), graph=graph_limits(graph=run.graph)
        )
        own = settings.get("shell") or {}
        rules += [rule for rule in own.get("redaction") or () if rule not in rules]
    return rules


def _overrides(run: Run, agent: str) -> Mapping[str, Any] | None:
    described = registry.description(run.graph)
    variant = described.variants.get(run.scenario) if described is not None else None
    return getattr(variant, "limits", {}).get(agent) if variant is not None else None


def escalation_for(handoff: Handoff) -> Escalation:
    """What the deadline sweep does with this wait: escalate to a backup owner, or the safe default.

    Reads the approval settings of the agent that waits (the handoff's receiver)
    from the run's pinned limits version with its graph variant's overrides (the
    demo's scenarios). A backup owner is used only when `on_expiry` is
    "escalate"; otherwise (and for runs without settings) there is none and the
    safe default (reject) applies.
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
    described = registry.description(run.graph) if run.mode == Run.Mode.HOSTED else None
    if described is None or not handoff.receiver:
        return {}
    variant = described.variants.get(run.scenario)
    overrides = getattr(variant, "limits", {}).get(handoff.receiver) if variant is not None else None
    version = _version_of(run) or LimitsVersion.current()
    settings = resolve(version.document, handoff.receiver, overrides, graph=described.limits)
    approval = settings.get("approval")
    return approval if isinstance(approval, Mapping) else {}


def _version_of(run: Run) -> LimitsVersion | None:
    # Read, never pin: looking at a run must not choose its limits.
    pin = RunLimits.objects.select_related("version").filter(run=run).first()
    return pin.version if pin is not None else None
