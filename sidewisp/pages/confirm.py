"""An action's confirmation page (what it will do, and whether it can now) and its result page."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from receipts import actions
from receipts.models import Decision, Handoff, Run
from sidewisp.pages import labels
from sidewisp.pages.decisions import decided_words, decision_on
from sidewisp.pages.evidence import reconcile_evidence
from sidewisp.pages.offers import run_offers
from sidewisp.pages.runpage import run_context
from sidewisp.pages.scope import PageScope
from sidewisp.pages.waits import with_stories
from sidewisp.web.access import VIEWER_PERMISSION


def pending_call(run: Run):
    """The tool call an approval resumes (names only), read from the durable graph; None if unreadable."""
    from receipts.workers.runtime import current

    try:
        return current().pending_call(run)
    except Exception:  # noqa: BLE001 - a confirmation page says "unknown" rather than failing
        return None


ACTION_URLS = {
    "approve": "sidewisp:wait-decide",
    "reject": "sidewisp:wait-decide",
    "edit": "sidewisp:wait-decide",
    "reassign": "sidewisp:wait-reassign",
    "cancel": "sidewisp:wait-cancel",
    "reopen": "sidewisp:task-reopen",
    "verify": "sidewisp:task-verify",
    "accept": "sidewisp:task-accept",
    "resolve": "sidewisp:task-resolve",
    "stop": "sidewisp:run-stop",
    "resume": "sidewisp:run-resume",
    "retry": "sidewisp:run-retry",
}
SETTLING = ("reopen", "verify", "accept", "resolve")


def confirm_context(what: str, found: actions.Result, form) -> dict:
    handoff, run = found.handoff, found.run
    target = handoff if handoff is not None else run
    offers = run_offers(run, found.actor)
    decided = decision_on(handoff) if what in (*actions.DECISION_KINDS, "reassign", "cancel") else None
    settled = actions.settlement(handoff) if what in SETTLING else None
    pending = pending_call(run) if what in actions.DECISION_KINDS and decided is None else None
    if what == "reassign":
        candidates = actions.wait_owner_candidates(handoff, by=found.actor)
        form.offer_owners(candidate.get_username() for candidate in candidates)
    not_now = _not_now(what, handoff, decided, settled)
    return {
        "what": what,
        "title": labels.CONFIRM_TITLES.get(what, what.capitalize()),
        "offers": offers,
        "decided": decided,
        "deciding": what in actions.DECISION_KINDS and decided is None,  # its form above its details (issue 21 §4)
        # issue 19 §1: a decision on a wait still open is on its way to the run: say what it waits for.
        "decided_words": decided_words(handoff, decided),
        "settled": settled,
        "offered": offers.allows(what) and not not_now,
        "not_offered": not_now or offers.why_not(what),
        "action_url": reverse(ACTION_URLS[what], args=[target.pk]),
        "handoff": handoff,
        "run": run,
        "form": form,
        "pending": pending,
        # The call's values (redacted, read from the checkpoint now) only for someone who may decide it.
        "values_shown": pending is not None
        and pending.arg_values is not None
        and actions.may(found.actor, actions.DECIDE_WAIT, handoff),
        "story": with_stories([handoff])[0].story if handoff is not None and handoff.wait_part else None,
        "edit_allowed": pending is not None and "edit" in pending.allowed_decisions,
        "evidence": reconcile_evidence(handoff) if handoff is not None else None,
        "now": timezone.now(),
    }


def _not_now(what: str, handoff: Handoff | None, decided: Decision | None, settled) -> str:
    """Why the handoff's state no longer permits `what` (the page then shows that, and no form)."""
    if what in actions.DECISION_KINDS:
        if decided is not None:
            return "This wait is already decided; nothing is left to decide."
        return "" if handoff.wait_open else "This wait is no longer open; nothing is left to decide."
    if what in ("reassign", "cancel") and not handoff.wait_open:
        return "This wait is no longer open."
    if what in ("reassign", "cancel") and decided is not None:
        return "This wait is already decided; it is not reassigned or cancelled any more."
    if what == "reopen" and actions.reopen_in_flight(handoff.run):
        return "A reopen of this task is already under way: its agent is working on it, or is about to."
    if what in SETTLING:
        if settled is not None:
            return "This false completion is already settled."
        if handoff.verdict != "FALSE_COMPLETE":
            verdict = labels.VERDICTS.get(handoff.verdict, labels.UNKNOWN)[1].lower()
            return f"This handoff is {verdict}, not a false completion."
    return ""


def result_context(result: actions.Result, user) -> dict:
    context: dict = {"result": result, "now": timezone.now()}
    if result.run is not None and result.ok and user.has_perm(VIEWER_PERMISSION):
        # The run, live: the operator watches the resume, re-verification or parking happen. Read again: the
        # action's copy predates what its commit set off (a resume can record receipts meanwhile).
        context.update(run_context(Run.objects.get(pk=result.run.pk), user))
        context["ws_url"] = PageScope("run", run_id=result.run.pk).ws_url()
    return context
