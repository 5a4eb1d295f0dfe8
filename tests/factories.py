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
