"""The false completions page: every open one, newest first, with what each offers."""

from __future__ import annotations

from receipts.actions import User
from receipts.org import teams
from receipts.queries import dashboard
from sidewisp.pages.offers import with_offers

FALSE_PER_PAGE = 25


def false_context(user: User, page: object = 1) -> dict:
    # The total is the runs' stored counts (no COUNT over every false completion per request), summed under the
    # team's names read once (one query), not the scope's subqueries evaluated on each of those runs.
    seen = teams.scope_for(user).resolved()
    count = dashboard.false_completion_count(seen=seen)
    found = dashboard.false_completions_query(seen=seen)
    page_obj = dashboard.offset_page(found, page, FALSE_PER_PAGE, count=count)
    return {
        "false_completions": with_offers(list(page_obj.object_list), user),
        "false_count": page_obj.paginator.count,
        "page_obj": page_obj,
        "query": "",
    }
