"""The glossary page: what each verdict means, which boundary decides it, its safe next move, with an example.

Every verdict badge links to its entry here (`entry_url`). The words come from sidewisp.pages.labels (the one
place pages read; the verdicts' own words are receipts.verdicts.words'), the next moves from the classifier.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import get_script_prefix, reverse
from django.views.decorators.http import require_GET

from receipts.verdicts import NEXT_MOVES, VERDICT_BOUNDARY
from sidewisp.pages import labels

# verdict -> (what it means, an example). Plain words: no field values, no prompts.
MEANINGS: dict[str, tuple[str, str]] = {
    "HEALTHY": (
        "Every boundary of the handoff passed: the route was declared, control moved, the tool protocol was "
        "closed, the context carried its required keys, the destination started and nothing waits.",
        "triage hands a refund question to billing; billing starts with the order id it needs.",
    ),
    "WAITING_ON_APPROVAL": (
        "The handoff waits for a person's decision, with an owner, a deadline and a resume token: a valid wait.",
        "billing wants to refund 400 €; the ops-lead group must approve before the refund tool runs.",
    ),
    "UNCERTAIN": (
        "The handoff waits, but the wait lacks an owner, a deadline or a resume token: nobody is sure to decide.",
        "a wait for approval was recorded without a deadline, so it could wait for ever.",
    ),
    "ROUTE_REJECTED": (
        "The sender handed work to a receiver that the contract version does not allow it to reach.",
        "triage transferred to payments, but the contract only declares triage → billing.",
    ),
    "STALE_CONTROL": (
        "The graph's persisted state does not show the receiver in control after the transfer.",
        "the transfer tool returned, but the checkpoint still names triage as the active agent.",
    ),
    "OPEN_TOOL_PROTOCOL": (
        "A tool call was left without its result in the history the next model call gets.",
        "the model asked for lookup_fare and transfer_to_ben together; ben was called with lookup_fare unanswered.",
    ),
    "CONTEXT_INCOMPLETE": (
        "The receiver got less than the route requires: a required context key was missing after reduction.",
        "the route triage → billing requires order_id, and the summary billing received dropped it.",
    ),
    "DESTINATION_NOT_STARTED": (
        "The transfer was made, but the receiving agent never started.",
        "control moved to billing, but billing's node did not run before the graph ended.",
    ),
    "FALSE_COMPLETE": (
        "The task claimed it was done, and its outcome verifier found the claim not true.",
        "the final message says the refund was issued; the verifier finds no refund for the order.",
    ),
}

# boundary -> what it checks.
BOUNDARY_MEANINGS: dict[str, str] = {
    "route": "Whether the contract version declares this sender → receiver route.",
    "control": "Whether the persisted graph state shows the receiver in control after the transfer.",
    "tool_protocol": "Whether every tool call has its result before the next model call.",
    "context": "Whether the receiver got every context key the route requires.",
    "destination": "Whether the receiving agent actually started.",
    "wait": "Whether a wait has an owner, a deadline and a resume token.",
    "outcome": "Whether the task's completion claim passes its outcome verifier.",
}


@dataclass(frozen=True)
class Entry:
    code: str
    icon: str
    words: str
    tone: str
    boundary: str
    next_move: str
    meaning: str
    example: str

    @property
    def anchor(self) -> str:
        return anchor(self.code)


def anchor(code: str) -> str:
    """The id of a verdict's entry on the glossary page."""
    return f"verdict-{code.lower().replace('_', '-')}"


def entry_url(code: str) -> str:
    """Where a verdict badge links: its glossary entry (the in-progress entry for a verdict not settled yet)."""
    target = anchor(code) if code in labels.VERDICTS else "in-progress"
    return f"{_glossary_path(get_script_prefix())}#{target}"


@lru_cache(maxsize=8)
def _glossary_path(prefix: str) -> str:
    """The glossary's path under the request's script prefix, reversed once per prefix: a list page links forty
    badges to it, and each `reverse` cost about 20 µs of CPU (issue 32 §4)."""
    return reverse("sidewisp:glossary")


def entries() -> list[Entry]:
    found = []
    for code, (icon, words, tone) in labels.VERDICTS.items():
        boundary = VERDICT_BOUNDARY.get(code)
        meaning, example = MEANINGS[code]
        where = labels.BOUNDARIES.get(boundary or "", "—")
        found.append(Entry(code, icon, words, tone, where, NEXT_MOVES[code], meaning, example))
    return found


@require_GET
@login_required  # words only: no evidence on this page
def glossary(request: HttpRequest) -> HttpResponse:
    """What the verdicts, boundaries and boundary states mean."""
    boundaries = [(labels.BOUNDARIES[name], BOUNDARY_MEANINGS[name]) for name in labels.BOUNDARIES]
    states = [(icon, words) for icon, words in labels.STATES.values()]
    outcomes = list(labels.WAIT_OUTCOMES.values())
    context = {"entries": entries(), "boundaries": boundaries, "states": states, "outcomes": outcomes}
    return render(request, "sidewisp/glossary.html", context)
