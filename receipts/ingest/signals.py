"""What the evidence domain announces, inside the transaction that changed it.

Receivers (owner notifications, alert rules, trace export) run in that
transaction: they may write `OutboxIntent`s, so a delivery is promised exactly
when the change commits and never when it rolls back, and they must not do
network I/O or raise (a receiver's bug must not lose a receipt: `send_robust`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from django.dispatch import Signal

from receipts.ingest.due import due_part

# Sent once per change to a handoff: a stored receipt part (cause = the part),
# a time-dependent re-classification (cause = "reclassified"), an operator's
# settlement (cause = the settlement), or the settle that made an in-progress
# verdict final (cause = "settled"; the verdict stays, `before.due` was set). kwargs: handoff, cause, before
# (a HandoffState, None for a new handoff), now.
handoff_changed = Signal()
# Sent once per set of changes (a batch's part entries, or one change elsewhere), before `handoff_changed`
# is sent for each of them: kwargs `changes`, a list of `Change` in the order they happened. The built-in
# receivers (alerts, notifications, trace export) listen here, so a batch costs them one pass.
handoffs_changed = Signal()
logger = logging.getLogger(__name__)


class HandoffState(NamedTuple):
    """What receivers compare before and after: verdict and wait, no evidence content.

    `due` is the part an unsettled verdict still waits for (receipts.ingest.due.due_part), "" once the verdict is
    final: a change from "reduced" to "" with the same verdict is that verdict's settlement. Immutable; a named
    tuple, made twice per part recorded (a frozen dataclass cost twice as much).
    """

    verdict: str
    wait_open: bool
    wait_owner: str
    wait_resolution: str
    due: str = ""

    @classmethod
    def of(cls, handoff) -> HandoffState:
        wait = handoff.wait_part or {}
        # By position (verdict, wait_open, wait_owner, wait_resolution, due): made once per part recorded.
        return cls(
            handoff.verdict or "",
            bool(handoff.wait_open),
            handoff.wait_owner or "",
            str(wait.get("resolution") or ""),
            due_part(handoff) or "",
        )

    @property
    def final(self) -> bool:
        """Whether alerts, notifications and exported spans may act on this verdict (spec v1.2 Settled)."""
        return not self.due


class Change(NamedTuple):
    """One change to a handoff: the handoff as the change left it, its cause, the states before and after
    (immutable, made per part recorded)."""

    handoff: object  # a receipts.models.Handoff (a snapshot when later changes of the same batch follow)
    cause: str
    before: HandoffState | None
    after: HandoffState
    now: datetime


def snapshot(handoff):
    """The handoff as it is now, for receivers of a change sent later (a batch's later parts change the object)."""
    copy = type(handoff).__new__(type(handoff))
    copy.__dict__ = handoff.__dict__.copy()
    return copy


def send_handoff_changed(handoff, *, cause: str, before: HandoffState | None, now) -> None:
    """Announce one change (`send_changes` of one)."""
    send_changes([Change(handoff, cause, before, HandoffState.of(handoff), now)])


def send_changes(changes: Sequence[Change]) -> None:
    """`handoffs_changed` once for all of `changes`, then `handoff_changed` for each when anyone listens."""
    if not changes:
        return
    sender = type(changes[0].handoff)
    _log_failures(handoffs_changed.send_robust(sender=sender, changes=list(changes)), "handoffs_changed")
    if not handoff_changed.has_listeners(sender):
        return
    for change in changes:
        kwargs = {"handoff": change.handoff, "cause": change.cause, "before": change.before, "now": change.now}
        _log_failures(handoff_changed.send_robust(sender=sender, **kwargs), "handoff_changed")


def _log_failures(results, signal: str) -> None:
    for receiver, result in results:
        if isinstance(result, Exception):
            name = getattr(receiver, "__qualname__", receiver)
            logger.warning("%s receiver %s failed: %s", signal, name, type(result).__name__)
