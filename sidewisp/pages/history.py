"""The run's history as pages show it: a section of the run page (live) and its own page, filtered by
handoff and paged by a cursor (`/runs/<id>/history/?handoff=<handoff id>&after=<cursor>`), oldest first unless
`order=newest` (then `before=<cursor>` pages back). Above the entries, the run's timeline (issue 30 §1); the
entries are grouped by handoff, each with its sequence number, its time to the millisecond, the time since the
run started and, when it ended a turn, a wait or a handoff, how long that took.

What happened is `receipts.queries.history`; this module adds the words, the links (the audit row each action
entry came from, for those who may read the audit log) and the result page's link to its entry.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET

from receipts import actions
from receipts.models import AuditEntry, Handoff, Run
from receipts.org import teams
from receipts.queries import history, timeline
from sidewisp.pages import history_words
from sidewisp.pages import timeline as drawing
from sidewisp.web.access import viewer_required

SECTION_SIZE = 20  # the run page's section: the newest entries, the rest on the history page
MAX_PARAM = 200


@require_GET
@viewer_required
def run_history(request: HttpRequest, pk: int) -> HttpResponse:
    """The run's whole history, oldest first (or newest first), a page at a time; `handoff` narrows it."""
    run = get_object_or_404(teams.visible_runs(request.user), pk=pk)  # another team's run: 404, like none
    wanted, before, after = (request.GET.get(name, "") for name in ("handoff", "before", "after"))
    order = request.GET.get("order", "")
    if _bad(wanted) or _bad(before) or _bad(after) or order not in ("", "oldest", "newest"):
        return HttpResponseBadRequest("The handoff, the order or the cursor is not valid.", content_type="text/plain")
    try:
        older = history.Cursor.parse(before) if before else None
        newer = history.Cursor.parse(after) if after else None
    except history.BadCursor as exc:
        return HttpResponseBadRequest(f"Refused: {exc}.", content_type="text/plain")
    handoff = get_object_or_404(Handoff, run=run, handoff_id=wanted) if wanted else None
    context = section_context(
        run,
        request.user,
        handoff=handoff,
        before=older,
        after=newer,
        newest_first=order == "newest" or (older is not None and not order),
        size=history.PAGE_SIZE,
    )
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
    after: history.Cursor | None = None,
    newest_first: bool = False,
    size: int = SECTION_SIZE,
    section: bool = False,
) -> dict:
    """What `sidewisp/_history.html` shows: the timeline, a page of entries grouped by handoff, the pager.

    The run page's section (`section`) shows the newest `size` entries, oldest first."""
    if section:
        page = history.page(run, size=size)
        page.entries.reverse()
    elif newest_first:
        page = history.page(run, handoff=handoff, older=before, size=size)
    else:
        page = history.page(run, handoff=handoff, newer=after, size=size, newest_first=False)
    audit_readable = actions.may_read_audit(user)
    base = reverse("sidewisp:run-history", args=[run.pk])
    keep = {"handoff": handoff.handoff_id} if handoff else {}
    tl = timeline.for_run(run, timezone.now())
    took = tl.took()
    start = tl.start
    for entry in page.entries:
        entry.audit_url = audit_url(entry.row) if entry.kind == "audit" and audit_readable else ""
        entry.clock = history_words.clock(entry.at)
        entry.since = history_words.since(entry.at, start)
        bar = took.get(entry.anchor)
        entry.took = f"{drawing.describe(bar).split(':')[0]} took {drawing.duration(bar.duration)}" if bar else ""
        entry.duration = drawing.duration(bar.duration) if bar else ""  # a tool call's report: the call's own time
    shown = {e.anchor for e in page.entries}

    def href(anchor: str) -> str:
        if anchor in shown:
            return f"#{anchor}"
        _, kind, pk = anchor.split("-")
        cursor = history.Cursor(tl.times.get(anchor, tl.start), kind, int(pk) - 1)  # its page starts at it
        return f"{base}?{urlencode({'after': str(cursor)})}#{anchor}"

    order = {"order": "newest"} if newest_first and not section else {}
    return {
        "run": run,
        "history": page,
        "groups": groups(page.entries),
        "timeline": drawing.drawn(tl, href),
        "newest_first": newest_first and not section,
        "history_url": f"{base}?{urlencode(keep)}" if keep else base,
        "first_url": f"{base}?{urlencode({**keep, **order})}" if keep or order else base,
        "order_url": f"{base}?{urlencode({**keep, **({} if order else {'order': 'newest'})})}",
        "older_url": f"{base}?{urlencode({**keep, **order, 'before': str(page.older)})}" if page.older else "",
        "newer_url": f"{base}?{urlencode({**keep, 'after': str(page.newer)})}" if page.newer else "",
        "earlier": section and page.older is not None,
    }


def groups(entries: list[history.Entry]) -> list[dict]:
    """Consecutive entries of one handoff (or of the run itself) as one group, in the page's order."""
    found: list[dict] = []
    for entry in entries:
        if found and found[-1]["handoff"] == entry.handoff:
            found[-1]["entries"].append(entry)
        else:
            found.append({"handoff": entry.handoff, "entries": [entry]})
    return found


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
