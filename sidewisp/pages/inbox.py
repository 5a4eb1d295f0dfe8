"""The waits inbox's facts per open wait (issue 30 §3): the tool it gates and its argument names, how long it has
waited; and the count of open waits a user owns, for the tab title and the browser notification (§7)."""

from __future__ import annotations

from dataclasses import dataclass

from django.urls import reverse

from receipts.actions import User
from receipts.models import Handoff
from receipts.org import teams
from receipts.queries import dashboard
from receipts.workers.runtime import PendingCall, current, stored_pending_call

NOT_RECORDED = "Tool call not recorded: the app did not send its tool name with the wait."
# The newest of a user's open waits the socket names (for a notification when one opens).
NOTIFIED_WAITS = 20


@dataclass(frozen=True)
class CallNames:
    """The gated tool call of a wait as an approver may see it in a list: names only, never values."""

    tool: str
    arg_keys: tuple[str, ...]


def pending_call(run) -> PendingCall | None:
    """The run's pending call (names; values only where the runtime reads them), None when unreadable."""
    try:
        return current().pending_call(run)
    except Exception:  # noqa: BLE001 - a list row says "not recorded" rather than failing the page
        return None


def call_names(handoff: Handoff, pending: PendingCall | None) -> CallNames | None:
    """The wait's pending call, or None when none is recorded for its current resume token."""
    if pending is None or not pending.tool:
        return None
    token = (handoff.wait_part or {}).get("resume_token_id")
    if token and pending.resume_token_id and pending.resume_token_id != token:
        return None  # a call of an earlier wait of the run (the app has not sent this one's)
    return CallNames(pending.tool, tuple(pending.arg_keys))


def with_calls(handoffs: list[Handoff]) -> list[Handoff]:
    """Set `call` (CallNames or None) on each open wait: its run's pending call, read once per run.

    The names the writer stored with the run (`Run.pending_call`) when there are any; only a run without them
    asks the runtime, which for a hosted run builds its graph and reads its checkpoint.
    """
    read: dict[int, PendingCall | None] = {}
    for h in handoffs:
        h.call = None
        if not h.wait_open:
            continue
        if h.run_id not in read:
            read[h.run_id] = stored_pending_call(h.run.pending_call) or pending_call(h.run)
        h.call = call_names(h, read[h.run_id])
        h.batchable = batchable(h)
    return handoffs


def mine(user: User) -> list[Handoff]:
    """The open waits `user` owns in the teams they see, newest first (the tab title counts them)."""
    if not user.is_authenticated:
        return []
    found = dashboard.open_waits_query(user.get_username(), seen=teams.scope_for(user, ""))
    return list(found.select_related(None).order_by("-pk").only("pk", "handoff_id")[:NOTIFIED_WAITS])


def my_waits(user: User) -> dict:
    """What the tab title and the notifier read: the count of open waits `user` owns and the newest of them."""
    if not user.is_authenticated:
        return {"count": 0, "waits": []}
    count = dashboard.open_waits_query(user.get_username(), seen=teams.scope_for(user, "")).count()
    waits = [
        {"pk": h.pk, "handoff_id": h.handoff_id, "url": reverse("sidewisp:confirm", args=["approve", h.pk])}
        for h in mine(user)[:NOTIFIED_WAITS]
    ]
    return {"count": count, "waits": waits}


def batchable(h: Handoff) -> bool:
    """Whether this row may be picked for a batch decision: the user is offered approve and reject on it."""
    offered = {link.what for link in getattr(h, "links", ())}
    return h.wait_open and {"approve", "reject"} <= offered and getattr(h, "call", None) is not None


def batch_tools(handoffs: list[Handoff]) -> list[str]:
    """The tools of the rows that may be picked together (a batch is of one tool)."""
    return sorted({h.call.tool for h in handoffs if batchable(h)})
