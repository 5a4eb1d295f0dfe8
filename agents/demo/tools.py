"""Domain tools with real effects on the store, idempotent per operation.

Results name ids and states only: no secrets, nothing a receipt could leak.
"""

from __future__ import annotations

import hashlib
import time
from typing import Annotated

from django.db import transaction
from django.utils import timezone
from langchain.tools import ToolRuntime, tool
from pydantic import Field

from agents.models import Order, Refund, Ticket
from agents.observe.database import closes_own_connection

PRICES = {"widget": 40, "gadget": 250, "server": 900}
MAX_QUANTITY = 100
TICKET_STATES = ("open", "in_progress", "resolved")
# The reason code each sensitive tool's approval wait carries (spec §2 wait_reasons).
SENSITIVE_TOOLS = {
    "place_order": "purchase_approval",
    "disclose_secret": "secret_disclosure",
    "refund": "irreversible_choice",
    "shell": "destructive_command",
}
# Tools that change the store, the workspace or the outside world: a dry run must emulate all of them.
EFFECT_TOOLS = frozenset(
    {"create_ticket", "update_ticket", "place_order", "refund", "disclose_secret", "confirm_with_supplier", "shell"}
)


class TransientServiceError(ConnectionError):
    """A dependency that may answer on the next attempt; the retry middleware retries these."""


def operation_id_of(runtime: ToolRuntime) -> str:
    configurable = (runtime.config or {}).get("configurable", {})
    operation_id = configurable.get("operation_id") or configurable.get("thread_id")
    if not operation_id:
        msg = "the run config has no operation_id or thread_id"
        raise ValueError(msg)
    return operation_id


def _short_id(prefix: str, *parts: str) -> str:
    return f"{prefix}-{hashlib.sha256('|'.join(parts).encode()).hexdigest()[:10]}"


@tool
@closes_own_connection
def create_ticket(subject: str, runtime: ToolRuntime) -> str:
    """Open the support ticket for this conversation (once per operation)."""
    operation_id = operation_id_of(runtime)
    ticket, _ = Ticket.objects.get_or_create(
        operation_id=operation_id, defaults={"ticket_id": _short_id("T", operation_id)}
    )
    return f"ticket_id={ticket.ticket_id} state={ticket.state}"


@tool
@closes_own_connection
def update_ticket(ticket_id: str, state: str, runtime: ToolRuntime) -> str:
    """Move a ticket to another state: open, in_progress or resolved."""
    if state not in TICKET_STATES:
        msg = f"state must be one of {', '.join(TICKET_STATES)}"
        raise ValueError(msg)
    with transaction.atomic():
        ticket = Ticket.objects.select_for_update().filter(operation_id=operation_id_of(runtime)).first()
        if ticket is None or ticket.ticket_id != ticket_id:
            msg = "no such ticket for this operation"
            raise ValueError(msg)
        ticket.state = state
        ticket.updated_at = timezone.now()
        ticket.save(update_fields=["state", "updated_at"])
    return f"ticket_id={ticket_id} state={state}"


@tool
def add_note(ticket_id: str, note: str) -> str:
    """Attach a note for the customer to the ticket (echoed back for confirmation)."""
    return f"note on {ticket_id}: {note}"


@tool
def check_inventory(sku: str) -> str:
    """Ask the inventory service whether an item is in stock."""
    msg = "inventory service did not answer"
    raise TransientServiceError(msg)


# The supplier answers slowly: a run can be caught (and its worker killed) mid-way.
SUPPLIER_LATENCY_SECONDS = 3.0


@tool
def confirm_with_supplier(sku: str) -> str:
    """Wait for the supplier to confirm it can ship the item (it takes a few seconds)."""
    time.sleep(SUPPLIER_LATENCY_SECONDS)
    return f"supplier confirmed {sku}"


def order_amount(sku: str, quantity: int) -> int:
    return PRICES.get(sku, 0) * max(quantity, 0)


@tool
@closes_own_connection
def place_order(
    sku: str, quantity: Annotated[int, Field(ge=1, le=MAX_QUANTITY, description="How many items")], runtime: ToolRuntime
) -> str:
    """Place the order for this operation (a repeated call returns the same order)."""
    if sku not in PRICES or quantity < 1:
        msg = "unknown item or quantity"
        raise ValueError(msg)
    operation_id = operation_id_of(runtime)
    order, _ = Order.objects.get_or_create(
        operation_id=operation_id,
        sku=sku,
        defaults={
            "order_id": _short_id("O", operation_id, sku),
            "quantity": quantity,
            "amount": order_amount(sku, quantity),
        },
    )
    return f"order_id={order.order_id} amount={order.amount}"


@tool
def disclose_secret(name: str) -> str:
    """Send a stored credential to the verified customer through the secure channel."""
    return f"credential {name} sent through the secure channel"


@tool
@closes_own_connection
def refund(order_id: str, runtime: ToolRuntime) -> str:
    """Refund an order. Irreversible."""
    operation_id = operation_id_of(runtime)
    row, _ = Refund.objects.get_or_create(
        operation_id=operation_id, order_ref=order_id, defaults={"refund_id": _short_id("R", operation_id, order_id)}
    )
    return f"refund_id={row.refund_id}"
