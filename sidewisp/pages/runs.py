"""The runs list: filtered, paged, and a search for exactly one id that opens it."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from django.db.models import Exists, OuterRef
from django.http import QueryDict
from django.urls import reverse

from receipts.actions import User
from receipts.models import MiddlewareReport
from receipts.org import teams
from receipts.queries import dashboard
from sidewisp.pages.filters import RunFilterForm
from sidewisp.pages.paging import filter_query, flat, list_page

RUNS_PER_PAGE = 25
# A run that ended without a handoff: the runs list and the run page warn of it.
NO_HANDOFF = MiddlewareReport.Kind.NO_HANDOFF


def runs_context(params: QueryDict | Mapping[str, str], user: User) -> dict:
    # The team's names read once (one query): the count, the rows and the filters' graphs then compare runs with a
    # few names instead of evaluating the scope's subqueries on each run (a search's count read every run).
    seen = teams.scope_for(user, flat(params).get("team", "")).resolved()
    graphs, route_versions = dashboard.search_choices(seen=seen)
    form = RunFilterForm(params, graphs=graphs, route_versions=route_versions)
    filters = form.filters()
    # The no-handoff warning is a subquery per listed row only: the LIMIT comes first (the keyset index).
    found = dashboard.runs(filters, seen=seen).annotate(no_handoff=_has_report(NO_HANDOFF))
    # A verdict in a time window is a filter on the handoffs: its runs are the newest, so they are counted newest
    # first (any other filter is counted the cheapest way the database finds).
    windowed = bool(filters.verdict and (filters.since or filters.until))
    page = list_page(found, "created_at", RUNS_PER_PAGE, form.cleaned_data, count_in_order=windowed)
    query = filter_query(params)
    return {"form": form, "page_obj": page, "query": urlencode(query), "filtered": bool(query)}


def exact_match_url(params: QueryDict | Mapping[str, str], user: User) -> str | None:
    """Where a search for exactly one operation id or handoff id goes: that run (at that handoff), when the
    user sees it (another team's id is no match, like an unknown one)."""
    text = (flat(params).get("q") or "").strip()
    found = dashboard.exact_match(text, seen=teams.scope_for(user)) if text and len(text) <= 200 else None
    if found is None:
        return None
    run_id, handoff_pk = found
    url = reverse("sidewisp:run-detail", args=[run_id])
    return f"{url}#handoff-{handoff_pk}" if handoff_pk else url


def _has_report(kind: str) -> Exists:
    return Exists(MiddlewareReport.objects.filter(run=OuterRef("pk"), kind=kind))
