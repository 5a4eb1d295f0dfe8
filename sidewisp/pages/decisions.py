"""A decision its run does not have yet, as the pages say it (issue 19 §1): decided, and what it waits for."""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass

from django.db.models import Q

from receipts.models import Decision, Handoff, Run
from receipts.queries import compiled
from receipts.queries.compiled import slot


@dataclass(frozen=True)
class Decided:
    """A decision on a wait that its run does not have yet, as the pages say it."""

    by: str
    kind: str
    at: object
    words: str  # "Decided by ops-lead, waiting for a worker"


def decisions_on_open_waits(handoffs: list[Handoff]) -> dict[int, Decided]:
    """The decisions answering these handoffs' open waits (by their current token), by handoff pk: one query."""
    tokens = {h.pk: (h.wait_part or {}).get("resume_token_id") for h in handoffs if h.wait_open}
    tokens = {pk: token for pk, token in tokens.items() if token}
    if not tokens:
        return {}
    found: dict[int, Decided] = {}
    # Compiled once per number of waits, rounded up to a power of two (the last pk repeated): a page asks this on
    # every render, and building the query cost more than the database spent on it.
    pks = list(tokens)
    size = 1 << (len(pks) - 1).bit_length()

    def build():
        # Equalities (a foreign key's `__in` takes values only, not slots).
        wanted = functools.reduce(operator.or_, (Q(handoff_id=slot(f"h{n}")) for n in range(size)))
        return Decision.objects.select_related("decided_by", "run").filter(wanted).order_by("decided_at", "pk")

    values = {f"h{n}": pks[min(n, len(pks) - 1)] for n in range(size)}
    for decision in compiled.once(("decisions on open waits", size), build).rows(**values):
        if decision.resume_token_id == tokens[decision.handoff_id]:
            found.setdefault(decision.handoff_id, decided(decision))
    return found


def decided(decision: Decision, *, expired: bool = False) -> Decided:
    """How a decision its run does not have yet reads: who decided, and what it waits for."""
    by = decision.decided_by.get_username() if decision.decided_by else "the system"
    if decision.applied_at is not None or decision.applications:
        waiting = "being applied by a worker"
    elif not decision.run.auto_continue:
        waiting = "held until auto-continue is resumed"
    elif decision.run.mode == Run.Mode.OBSERVED:
        waiting = "waiting for the app to claim it"
    else:
        waiting = "waiting for a worker"
    words = f"Expiring, {waiting}" if expired else f"Decided by {by}, {waiting}"
    return Decided(by=by, kind=decision.kind, at=decision.decided_at, words=words)


def mark_expiring(handoffs: list[Handoff]) -> None:
    """Set `expiring` on closed waits the deadline sweep decided whose decision no worker has taken yet."""
    expired = {h.pk: h for h in handoffs if not h.wait_open and (h.wait_part or {}).get("resolution") == "expired"}
    for h in handoffs:
        h.expiring = None
    if not expired:
        return
    waiting = Decision.objects.select_related("run").filter(
        handoff_id__in=expired, decided_by__isnull=True, applied_at__isnull=True, applications=0
    )
    for decision in waiting:
        expired[decision.handoff_id].expiring = decided(decision, expired=True)


def decision_on(handoff: Handoff) -> Decision | None:
    """The decision that answered this wait (by its token), or, once the wait is closed, its latest one."""
    decisions = Decision.objects.select_related("decided_by").filter(handoff=handoff).order_by("-decided_at", "-pk")
    decisions = decisions.exclude(kind=Decision.Kind.REOPEN)  # a reopen answers no wait
    token = (handoff.wait_part or {}).get("resume_token_id")
    if handoff.wait_open:
        return decisions.filter(resume_token_id=token).first() if token else None
    return decisions.first()


def decided_words(handoff: Handoff | None, decision: Decision | None) -> str:
    """ "Decided by X, waiting for a worker" while the run does not have `decision` yet; "" otherwise."""
    if handoff is None or decision is None or not handoff.wait_open:
        return ""
    return decided(decision).words
