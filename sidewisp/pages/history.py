"""The run's history as pages show it: a section of the run page (live) and its own page, filtered by
handoff and paged by a cursor (`/runs/<id>/history/?handoff=<handoff id>&before=<cursor>`).

What happened is `receipts.queries.history`; this module adds the words, the links (the audit row each action
entry came from, for those who may read the audit log) and the result page's link to its entry.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from receipts import actions
from receipts.models import AuditEntry, Handoff, Run
from receipts.org import teams
from receipts.queries import history
from sidewisp.web.access import viewer_required

SECTION_SIZE = 20  # the run page's section: the newest entries, the rest on the history page
MAX_PARAM = 200


@require_GET
@viewer_required
def run_history(request: HttpRequest, pk: int) -> HttpResponse:
    """The run's whole history, newest first, a page at a time; `handoff` narrows it to one handoff."""
    run = get_object_or_404(teams.visible_runs(request.user), pk=pk)  # another team's run: 404, like none
    wanted, before = request.GET.get("handoff", ""), request.GET.get("before", "")
    if _bad(wanted) or _bad(before):
        return HttpResponseBadRequest("The handoff or the cursor is not valid.", content_type="text/plain")
    try:
        cursor = history.Cursor.parse(before) if before else None
    except history.BadCursor as exc:
        return HttpResponseBadRequest(f"Refused: {exc}.", content_type="text/plain")
    handoff = get_object_or_404(Handoff, run=run, handoff_id=wanted) if wanted else None
    context = section_context(run, request.user, handoff=handoff, before=cursor, size=history.PAGE_SIZE)
    context["choices"] = list(run.handoffs.order_by("created_at", "pk").values_list("handoff_id", flat=True)[:200])
    response = render(request, "sidewisp/history.html", context)
    patch_vary_headers(response, ["HX-Request"])
    return response


def section_context(
    run: Run,
    user,
    *,
    handoff: Handoff | None = None,
    before: history.Cursor | None = None,
    size: int = SECTION_SIZE,
) -> dict:
    """What `sidewisp/_history.html` shows: a page of entries, each with its links, and the pager."""
    page = history.page(run, handoff=handoff, older=before, size=size)
    audit_readable = actions.may_read_audit(user)
    for entry in page.entries:
        entry.audit_url = audit_url(entry.row) if entry.kind == "audit" and audit_readable else ""
    base = reverse("sidewisp:run-history", args=[run.pk])
    keep = {"handoff": handoff.handoff_id} if handoff else {}
    return {
        "run": run,
        "history": page,
        "history_url": f"{base}?{urlencode(keep)}" if keep else base,
        "older_url": f"{base}?{urlencode({**keep, 'before': str(page.older)})}" if page.older else "",
    }


def audit_url(entry: AuditEntry) -> str:
    """The audit log narrowed to this entry's second, action and actor, at its row (`#audit-<pk>`)."""
    second = entry.at.replace(microsecond=0)
    query = {
        "action": entry.action,
        "actor": entry.actor_name,
        "since": second.strftime("%Y-%m-%dT%H:%M:%S"),
        "until": (second + timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S"),
    }
    return f"{reverse('sidewisp:audit')}?{urlencode(query)}#audit-{entry.pk}"


def entry_url(entry: AuditEntry) -> str:
    """Where an action's entry is in its run's history: the history page around it, at its anchor."""
    cursor = history.Cursor(entry.at + timedelta(microseconds=1), "audit", 0)
    query = urlencode({"before": str(cursor)})
    return f"{reverse('sidewisp:run-history', args=[entry.run_id])}?{query}#history-audit-{entry.pk}"


def action_entry(result: actions.Result, key: str) -> AuditEntry | None:
    """The audit entry the action behind `result` made (found by its idempotency key), if it has a run."""
    if result.run is None or not key or _bad(key):
        return None
    return AuditEntry.objects.filter(run=result.run, detail__key=key).order_by("-at", "-pk").first()


def _bad(value: str) -> bool:
    # PostgreSQL refuses NUL in text; nothing this page reads is longer.
    return len(value) > MAX_PARAM or "\x00" in value
