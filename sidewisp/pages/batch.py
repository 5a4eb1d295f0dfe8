"""Deciding several waits of one tool at once (issue 30 §7): one confirm page, each decision on its own.

The confirm page lists each wait it will decide with its tool call's arguments (as the single confirm page shows
them, read from the checkpoint now) and names the waits it leaves out, and why. Its form carries what the page
showed, signed: each wait's resume token, owner and deadline. The POST decides each wait through
`receipts.actions.decide` (checked, applied and audited on its own, under its row lock); a wait changed since the
page (reassigned, decided, expired) is left out and named. A re-POST decides nothing again.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from django.core import signing

from receipts import actions
from receipts.actions.steps import iso
from receipts.models import Handoff
from sidewisp.pages.decisions import decided_words, decision_on
from sidewisp.pages.inbox import call_names
from sidewisp.pages.offers import run_offers

KINDS = ("approve", "reject")
MAX_WAITS = 50
SALT = "sidewisp.pages.batch"


class BadBatch(ValueError):
    """The request names no batch this page can show; the message says what is wrong."""


@dataclass
class Item:
    handoff: Handoff
    pending: object = None  # receipts.workers.runtime.PendingCall
    values_shown: bool = False
    why_not: str = ""  # "" = included


@dataclass
class Batch:
    kind: str
    tool: str = ""
    included: list[Item] = field(default_factory=list)
    left_out: list[Item] = field(default_factory=list)

    @property
    def signed(self) -> str:
        """What the page showed of each included wait, for its POST (signed: a page cannot be forged)."""
        shown = [
            {"pk": item.handoff.pk, **expected(item.handoff), "token": wait_token(item.handoff)}
            for item in self.included
        ]
        return signing.dumps({"kind": self.kind, "tool": self.tool, "waits": shown}, salt=SALT)


def wait_token(handoff: Handoff) -> str:
    return str((handoff.wait_part or {}).get("resume_token_id") or "")


def expected(handoff: Handoff) -> dict:
    return {"owner": handoff.wait_owner or "", "deadline": iso(handoff.wait_deadline) if handoff.wait_deadline else ""}


def parse_picks(kind: str, picked: list[str]) -> list[int]:
    if kind not in KINDS:
        raise BadBatch(f"decision must be one of {', '.join(KINDS)}")
    if not picked:
        raise BadBatch("Select at least one wait (wait=<id>) to decide.")
    if len(picked) > MAX_WAITS:
        raise BadBatch(f"A batch decides at most {MAX_WAITS} waits.")
    if not all(value.isdigit() and len(value) < 12 for value in picked):
        raise BadBatch("wait must be the id of a wait (a whole number).")
    return list(dict.fromkeys(int(value) for value in picked))


def build(user, kind: str, picked: list[str]) -> Batch:
    """The batch confirm page's waits: those `user` may decide `kind` now, of the first one's tool, and the rest
    named with the reason they are left out. Nothing is written (opening a page is not an attempt)."""
    from sidewisp.pages.confirm import pending_call

    batch = Batch(kind)
    for pk in parse_picks(kind, picked):
        found = actions.look(user, actions.DECIDE_WAIT, pk)
        if found.outcome == actions.Outcome.NOT_FOUND:
            batch.left_out.append(Item(Handoff(pk=pk, handoff_id=f"#{pk}"), why_not=f"There is no wait {pk}."))
            continue
        item = Item(found.handoff)
        if not found.ok:
            item.why_not = found.message
        else:
            item.why_not = _why_not_now(found.handoff, user, kind)
        if not item.why_not:
            item.pending = pending_call(found.run)
            names = call_names(found.handoff, item.pending)
            if names is None:
                item.why_not = "Its tool call is not recorded: decide it on its own page, where you see what it runs."
            elif batch.tool and names.tool != batch.tool:
                item.why_not = f"It gates another tool ({names.tool}); a batch decides one tool's waits."
            else:
                batch.tool = names.tool
                item.values_shown = item.pending.arg_values is not None
        (batch.left_out if item.why_not else batch.included).append(item)
    return batch


def _why_not_now(handoff: Handoff, user, kind: str) -> str:
    if not handoff.wait_open:
        return "This wait is no longer open."
    decided = decision_on(handoff)
    if decided is not None:
        return decided_words(handoff, decided) + "."
    if handoff.verdict != "WAITING_ON_APPROVAL":
        return "This wait is not valid (it needs an owner, a reason, a deadline and a resume token): reassign it."
    offers = run_offers(handoff.run, user, verdicts=set())
    if not offers.allows(kind):
        return offers.why_not(kind)
    return ""


@dataclass
class Outcome:
    handoff: Handoff | None
    handoff_pk: int
    outcome: str  # done | noop | refused | denied | not_found
    message: str


def item_key(key: str, pk: int) -> str:
    """Each wait's idempotency key in a batch: the form's key and the wait (a re-POST finds the same ones)."""
    return hashlib.sha256(f"{key}:{pk}".encode()).hexdigest()[:32]


def apply(user, signed: str, key: str, reason: str) -> tuple[str, list[Outcome]]:
    """Decide each wait the page showed, on its own; (kind, one outcome per wait). BadBatch when forged or old."""
    try:
        shown = signing.loads(signed, salt=SALT, max_age=24 * 3600)
    except signing.BadSignature:
        raise BadBatch("This batch's page is not one Sidewisp made (or it is over a day old); open it again.") from None
    kind = shown.get("kind")
    if kind not in KINDS:
        raise BadBatch("The batch names no decision.")
    if kind == "reject" and not reason.strip():
        raise BadBatch("A rejection needs a reason.")
    outcomes = []
    for wait in shown.get("waits", [])[:MAX_WAITS]:
        pk = int(wait["pk"])
        result = actions.decide(
            user=user,
            handoff_id=pk,
            kind=kind,
            token=str(wait["token"]),
            key=item_key(key, pk),
            reason=reason,
            expected={"owner": wait["owner"], "deadline": wait["deadline"]},
        )
        message = result.message
        if result.outcome == "denied" and result.handoff is not None and result.handoff.wait_owner != wait["owner"]:
            # Denied because the wait is someone else's now: say what changed (the denial is audited as such).
            message = f"This wait was reassigned to {result.handoff.wait_owner or 'nobody'} meanwhile; nothing changed."
        outcomes.append(Outcome(result.handoff, pk, result.outcome, message))
    return kind, outcomes
