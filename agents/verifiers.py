"""Outcome verifiers: did the task really happen in the store? Never trust the final message."""

from __future__ import annotations

from collections.abc import Callable

from agents.evidence import digest
from agents.models import Order, Refund, Ticket

Check = Callable[[str], bool]


def ticket_state_changed(operation_id: str) -> bool:
    return Ticket.objects.filter(operation_id=operation_id).exclude(state="open").exists()


def order_exists(operation_id: str) -> bool:
    return Order.objects.filter(operation_id=operation_id).exists()


def refund_exists(operation_id: str) -> bool:
    return Refund.objects.filter(operation_id=operation_id).exists()


VERIFIERS: dict[str, Check] = {
    "ticket_state_changed": ticket_state_changed,
    "order_exists": order_exists,
    "refund_exists": refund_exists,
}


def verifier(name: str) -> Callable[[str], tuple[str, str, str]]:
    """The named verifier in the observer's shape: operation id -> (name, pass|fail, receipt id)."""
    check = VERIFIERS[name]

    def run(operation_id: str) -> tuple[str, str, str]:
        result = "pass" if check(operation_id) else "fail"
        return name, result, f"v-{digest(name, operation_id, result)}"

    return run
