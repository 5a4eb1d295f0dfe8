"""What each operator page shows, shared by the views and the WebSocket consumer.

A page is described by a `PageScope` (which page, which run, which filters).
The view renders the page or, for htmx requests, its fragment; the consumer
renders the same fragment templates as out-of-band swaps, from the database,
on connect and after events. One source of markup, one source of truth.
One module per page (overview, runs, runpage, waits, falsecompletions, audit,
confirm, mappage, history, decidedpage) and per shared piece (scope, filters,
paging, offers, decisions, evidence, labels, mapdrawing, auditcsv); the names
below are re-exported so that `from sidewisp.pages import X` keeps working.

May import: receipts, agents (limits, host.teamshape), sidewisp.web; never: sidewisp.views, sidewisp.api,
sidewisp.forms (views use pages, not the reverse) nor sidewisp.live, which builds on pages (the live renderer's
names are re-exported here on first use, where they were before it had a module of its own).
"""

from __future__ import annotations

from receipts.actions import User
from sidewisp.pages import labels
from sidewisp.pages.audit import AUDIT_PER_PAGE, AuditFilterForm, AuditQuery, audit_context, audit_seen
from sidewisp.pages.confirm import (
    ACTION_URLS,
    SETTLING,
    confirm_context,
    pending_call,
    result_context,
)
from sidewisp.pages.decisions import Decided, decided, decided_words, decisions_on_open_waits
from sidewisp.pages.evidence import Evidence, reconcile_evidence
from sidewisp.pages.falsecompletions import FALSE_PER_PAGE, false_context
from sidewisp.pages.filters import HEALTH_LABELS, WINDOWS, RunFilterForm
from sidewisp.pages.offers import Link, Note, Offers, handoff_links, run_offers, with_offers
from sidewisp.pages.overview import overview_context
from sidewisp.pages.paging import MAX_NUMBERED_PAGE, POSITION_PARAMS, ListPositionForm, list_page, too_deep_query
from sidewisp.pages.runpage import run_context
from sidewisp.pages.runs import NO_HANDOFF, RUNS_PER_PAGE, exact_match_url, runs_context
from sidewisp.pages.scope import PAGES, PageScope, team_switch
from sidewisp.pages.waits import (
    CLOSING_ACTIONS,
    RESOLVED_LIMIT,
    WAITS_PER_PAGE,
    WaitStory,
    resolved_waits,
    waits_context,
    with_stories,
)
from sidewisp.web.access import VIEWER_PERMISSION

__all__ = [
    "ACTION_URLS",
    "AUDIT_PER_PAGE",
    "CLOSING_ACTIONS",
    "FALSE_PER_PAGE",
    "HEALTH_LABELS",
    "LIVE_NAMES",
    "MAX_NUMBERED_PAGE",
    "NO_HANDOFF",
    "PAGES",
    "POSITION_PARAMS",
    "RESOLVED_LIMIT",
    "RUNS_PER_PAGE",
    "SETTLING",
    "VIEWER_PERMISSION",
    "WAITS_PER_PAGE",
    "WINDOWS",
    "AuditFilterForm",
    "AuditQuery",
    "Decided",
    "Evidence",
    "Link",
    "ListPositionForm",
    "Note",
    "Offers",
    "PageScope",
    "RunFilterForm",
    "User",
    "WaitStory",
    "audit_context",
    "audit_seen",
    "confirm_context",
    "decided",
    "decided_words",
    "decisions_on_open_waits",
    "exact_match_url",
    "false_context",
    "handoff_links",
    "labels",
    "list_page",
    "overview_context",
    "pending_call",
    "reconcile_evidence",
    "resolved_waits",
    "result_context",
    "run_context",
    "run_offers",
    "runs_context",
    "team_switch",
    "too_deep_query",
    "waits_context",
    "with_offers",
    "with_stories",
]

# --- the live pages' renderer: sidewisp.live.render (it builds on the contexts above) ---------------

LIVE_NAMES = frozenset({"LivePage", "audience", "change_marker", "render_live", "render_oob", "team_refused"})


def __getattr__(name: str):
    # Imported on first use, not here: sidewisp.live.render imports this package's modules.
    if name in LIVE_NAMES:
        from sidewisp.live import render as liverender

        return getattr(liverender, name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
