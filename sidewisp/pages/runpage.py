"""The run page: its header, its handoffs' timeline with their evidence and offers, its reports."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils import timezone

from agents.limits import effective_stack
from receipts import actions
from receipts.actions import User
from receipts.ingest import health as run_health
from receipts.models import Handoff, Run, VerdictChange
from receipts.org import teams
from receipts.queries import dashboard
from sidewisp.pages import labels
from sidewisp.pages.evidence import reconcile_evidence
from sidewisp.pages.offers import Offers, declare_offer, offer_on_handoff, run_offers
from sidewisp.pages.runs import NO_HANDOFF
from sidewisp.pages.waits import with_stories


def run_context(run: Run, user: User, page: object = 1, visible: QuerySet[Run] | None = None) -> dict:
    """What the run page shows; `visible` is the runs `user` sees when the caller built it already (the view, which
    found the run in it): building that filter again costs 2 ms of CPU (its team subqueries resolved anew)."""
    handoff_count = dashboard.run_handoff_count(run)
    # Page 1 holds the latest handoffs; no query of its own (the count is the page's anyway).
    timeline_page = Paginator(range(handoff_count), dashboard.TIMELINE_LIMIT).get_page(page)
    timeline = dashboard.run_timeline(run, page=timeline_page.number)
    handoffs = [item.handoff for item in timeline]
    # Settled verdicts: the header shows the run row read with these handoffs, never an older copy.
    run = handoffs[0].run if handoffs else run
    # A verdict in progress is not one yet: nothing is offered or inspected for it.
    final = [h for h in handoffs if not run_health.due_part(h)]
    stoppable = any(h.verdict in actions.STOPPABLE for h in final)
    offers = run_offers(run, user, stoppable=stoppable, verdicts={h.verdict for h in final})
    history = _verdict_history(handoffs)
    settled = actions.settlements(handoffs, history)
    for h in handoffs:
        h.evidence = reconcile_evidence(h) if h in final else None
        h.history = _dated_in_progress(h, history.get(h.pk, []))
        offer_on_handoff(h, offers, user, settled.get(h.pk))
    with_stories(handoffs)
    missing = dashboard.missing_context_keys(handoffs)
    for h in handoffs:
        h.missing_keys = missing.get(h.pk, [])
    # Identical reports grouped with a count (a zero call limit repeats one report per attempt).
    reports = dashboard.run_report_groups(run, limit=dashboard.REPORT_LIMIT + 1)
    return {
        "run": run,
        "offers": offers,
        "inspect": _inspect(run, handoffs, offers),
        # Recorded once, when the run ends: among the newest reports (no query of its own).
        "no_handoff": any(report.kind == NO_HANDOFF for report in reports),
        "timeline": timeline,
        "stoppable": stoppable,
        "held_decisions": run.decisions.filter(applied_at__isnull=True).count() if not run.auto_continue else 0,
        "handoff_count": handoff_count,
        "timeline_page": timeline_page,
        "reports": reports[: dashboard.REPORT_LIMIT],
        "more_reports": len(reports) > dashboard.REPORT_LIMIT,
        "effective_limits": effective_stack(run),
        "declare": declare_offer(run, user, final),
        "timeline_limit": dashboard.TIMELINE_LIMIT,
        "now": timezone.now(),
        **_thread_runs(run, teams.visible_runs(user) if visible is None else visible),
    }


# At most this many of the thread's other runs are linked from a run's page (the newest ones).
THREAD_LIMIT = 20


def _thread_runs(run: Run, visible: QuerySet[Run]) -> dict:
    """The other runs of the run's thread among the `visible` ones (issue 28: a chat app's turns, a run per
    operation id on one thread), oldest first; the newest THREAD_LIMIT of them, and whether there are more."""
    others = visible.of_thread(run).only("pk", "operation_id", "status", "health", "created_at")
    newest = list(others.order_by("-created_at", "-pk")[: THREAD_LIMIT + 1])
    return {"thread_runs": newest[:THREAD_LIMIT][::-1], "more_thread_runs": len(newest) > THREAD_LIMIT}


def _inspect(run: Run, handoffs: list[Handoff], offers: Offers) -> list[dict[str, str]]:
    """Where to look before a retry: each failing handoff's deciding boundary, then the run's reports."""
    if not (offers.retry or offers.retry_hint or run.status == Run.Status.PARKED):
        return []
    unproblematic = ("HEALTHY", "WAITING_ON_APPROVAL")
    failing = [h for h in handoffs if h.boundary and h.verdict not in unproblematic and not run_health.due_part(h)]
    places = [
        {
            "anchor": f"handoff-{h.pk}-{h.boundary}",
            "label": f"{labels.BOUNDARIES.get(h.boundary, h.boundary)} boundary of {h.handoff_id}",
        }
        for h in failing
    ]
    return [*places, {"anchor": f"run-{run.pk}-reports", "label": "what other middleware reported"}]


def _dated_in_progress(h: Handoff, changes: list[VerdictChange]) -> list[VerdictChange]:
    """`changes`, each with `due`: the part the verdict was waiting for then, "" where it was final.

    The latest change is what the card shows now (receipts.ingest.health.due_part); an earlier one was in progress
    when its verdict lacked a due part that arrived later, before the handoff settled.
    """
    for change in changes:
        part = run_health.DUE_PARTS.get(change.verdict)
        arrived = h.first_arrived.get(part) if part else None
        unsettled = h.settled_at is None or change.at < h.settled_at
        change.due = part if part and (arrived is None or change.at < arrived) and unsettled else ""
    if changes:
        changes[-1].due = run_health.due_part(h) or ""
    return changes


def _verdict_history(handoffs: list[Handoff]) -> dict[int, list[VerdictChange]]:
    """Each handoff's verdict changes, oldest first (one query)."""
    history: dict[int, list[VerdictChange]] = {}
    for change in VerdictChange.objects.filter(handoff__in=handoffs).order_by("at", "pk"):
        history.setdefault(change.handoff_id, []).append(change)
    return history
