"""Settled verdicts (spec v1.2): which part a handoff's failing verdict still waits for, in Python and in SQL.

A failing verdict that lacks a part still due is *in progress*, not a problem, until its handoff is settled
(`due_part`, the one rule every page, count, alert and export reads; `due_condition` is the same rule in SQL).
Importing this module imports no Django (the query condition imports it when called).
"""

from __future__ import annotations

# A failing verdict whose boundary lacks this part is "not yet" while its handoff is unsettled: the spec's
# due parts (`reduced` by the end of the step that applied the update, `destination` by the end of the next).
DUE_PARTS: dict[str, str] = {"STALE_CONTROL": "reduced", "DESTINATION_NOT_STARTED": "destination"}
# After a wait was resolved, the claim "waiting" predates the decision: the resumed run's next final status
# is due, and UNCERTAIN ("final_status is waiting but no open wait receipt") is not yet a verdict.
AWAITED_STATUS = "final_status"
DUE_WORDS = {
    "reduced": "the reduced receipt",
    "destination": "the destination receipt",
    AWAITED_STATUS: "the final status",
}
# Run.latest_verdict of a latest handoff in progress: "STALE_CONTROL:reduced" (`latest_code`, `split_latest`).
_DUE_MARK = ":"


def due_part(handoff) -> str | None:
    """The part an unsettled handoff's failing verdict still waits for, or None when the verdict is final.

    "reduced" (STALE_CONTROL without a reduced receipt), "destination" (DESTINATION_NOT_STARTED without a
    destination receipt) or "final_status" (UNCERTAIN because the claim "waiting" outlived its resolved
    wait). A verdict on evidence that is present and wrong is final at once; a settled handoff's always is.
    """
    if handoff.settled_at is not None:
        return None
    part = DUE_PARTS.get(handoff.verdict)
    if part is not None:
        return part if getattr(handoff, f"{part}_part") is None else None
    resolved_wait = handoff.wait_part is not None and not handoff.wait_open
    if handoff.verdict == "UNCERTAIN" and handoff.final_status == "waiting" and resolved_wait:
        return AWAITED_STATUS
    return None


def due_condition(prefix: str = ""):
    """`due_part(handoff) is not None` as a query condition (a Q on Handoff): the same rule, in SQL. `prefix`
    reaches the handoff from another model (`"handoff__"` on a receipt)."""
    from django.db.models import Q

    def on(**lookups) -> Q:
        return Q(**{f"{prefix}{name}": value for name, value in lookups.items()})

    missing = on(verdict="STALE_CONTROL", reduced_part__isnull=True) | on(
        verdict="DESTINATION_NOT_STARTED", destination_part__isnull=True
    )
    awaited = on(verdict="UNCERTAIN", final_status="waiting", wait_part__isnull=False, wait_open=False)
    return on(settled_at__isnull=True) & (missing | awaited)


def due_of_verdict(verdict: str) -> str:
    """The part an in-progress handoff of `verdict` waits for (what `due_part` gives for it)."""
    return DUE_PARTS.get(verdict, AWAITED_STATUS)


def in_progress_words(part: str) -> str:
    """What a page says of a handoff in progress: "In progress — waiting for the reduced receipt"."""
    return f"In progress — waiting for {DUE_WORDS.get(part, part)}"


def latest_code(verdict: str, due: str | None) -> str:
    """The value stored in Run.latest_verdict: the verdict, with the part it waits for while in progress."""
    return f"{verdict}{_DUE_MARK}{due}" if verdict and due else verdict


def split_latest(code: str) -> tuple[str, str]:
    """(verdict, due part or "") from a stored Run.latest_verdict."""
    verdict, _, due = code.partition(_DUE_MARK)
    return verdict, due
