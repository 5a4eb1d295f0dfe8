"""Evidence for tests: one triage → sales handoff proven at every boundary.

Plain Python (no Django), so the pure classifier tests can use it too.
"""

from __future__ import annotations

import copy

# The spec's public contracts (shared/spec/cases/contracts.json).
_PUBLIC_CONTRACTS = {
    "wait_reasons": ["purchase_approval", "secret_disclosure", "irreversible_choice"],
    "routes": {
        "routes/1": {
            "triage": {
                "sales": ["request_type", "customer_tier", "consent_status"],
                "support": ["request_type", "ticket_id"],
            },
            "sales": {"billing": ["order_id"]},
        },
        "routes/2": {
            "triage": {
                "sales": ["request_type", "customer_tier", "consent_status", "region"],
                "support": ["request_type", "ticket_id"],
            },
            "sales": {"billing": ["order_id", "currency"]},
        },
    },
}


def public_contracts() -> dict:
    """A fresh copy of the spec's public contracts document."""
    return copy.deepcopy(_PUBLIC_CONTRACTS)


def healthy_parts() -> dict[str, dict]:
    """The receipt parts of a healthy handoff, verified after its destination started."""
    return {
        "created": {
            "sender": "triage",
            "receiver": "sales",
            "route_version": "routes/1",
            "tool_call_id": "call_abc",
            "required_context_keys": ["request_type", "customer_tier", "consent_status"],
            "at": "2026-07-30T10:00:00Z",
        },
        "reduced": {
            "goto": "sales",
            "active_agent_before": "triage",
            "active_agent_after": "sales",
            "graph_scope": "parent",
            "tool_message_ids": ["call_abc"],
            "context_keys": ["request_type", "customer_tier", "consent_status"],
            "at": "2026-07-30T10:00:01Z",
        },
        "destination": {"node_id": "sales", "started_at": "2026-07-30T10:00:02Z", "attempt_id": "a-1"},
        "verification": {
            "verifier": "order_exists",
            "result": "pass",
            "checked_at": "2026-07-30T10:05:00Z",
            "receipt_id": "v-1",
        },
    }


def healthy_bundle(handoff_id: str = "h-1", **fields) -> dict:
    """A whole `sidewisp.handoff/1` bundle of the healthy handoff, claimed complete; `fields` override."""
    return {
        "schema": "sidewisp.handoff/1",
        "handoff_id": handoff_id,
        "operation_id": f"op-{handoff_id}" if handoff_id != "h-1" else "op-1",
        **healthy_parts(),
        "final_status": "complete",
        **fields,
    }


def observed_run_entries(operation_id: str, handoff_id: str | None = None) -> list[list]:
    """The evidence entries of a typical observed run, in the batches the writer hands its sink today.

    What `observe` submits for a scripted two-agent run with one healthy handoff (bench.overhead's run): its
    start; the handoff's `created` (the checkpoint barrier waits for it, which ends the first batch); then
    `reduced`, `destination`, the settle of the step, the run's verification and final status (outcome parts
    without a handoff id) and its end.
    """
    from receipts.ingest.intake import PartEntry, RunEntry, SettleEntry
    from receipts.models import Run

    handoff_id = handoff_id or f"h-{operation_id}"
    found = healthy_parts()
    return [
        [
            RunEntry(operation_id, Run.Status.RUNNING, thread_id=operation_id),
            PartEntry(operation_id, handoff_id, "created", found["created"]),
        ],
        [
            PartEntry(operation_id, handoff_id, "reduced", found["reduced"]),
            PartEntry(operation_id, handoff_id, "destination", found["destination"], "task-a-1"),
            SettleEntry(operation_id, handoff_id),
            PartEntry(operation_id, None, "verification", found["verification"], "verify-end"),
            PartEntry(operation_id, None, "final_status", "complete", "complete-end"),
            RunEntry(operation_id, Run.Status.COMPLETE, final=True),
        ],
    ]
