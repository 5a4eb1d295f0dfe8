"""The overview page: the window's counts and stats, the newest handoffs, the soonest waits."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from receipts.actions import User
from receipts.org import teams
from receipts.queries import dashboard
from sidewisp.pages import labels
from sidewisp.pages.offers import with_offers
from sidewisp.pages.scope import team_switch


def overview_context(user: User, window: str = "", team: str = "") -> dict:
    window = window if window in labels.WINDOWS else labels.DEFAULT_WINDOW
    # Issue 22 §2: the user's teams' runs (refuses a team not theirs), their graph and source names read once
    # for the page's many counts.
    seen = teams.scope_for(user, team).resolved()
    now = timezone.now()
    since = now - timedelta(seconds=labels.WINDOWS[window][1])
    health_counts, status_counts = dashboard.run_status_counts(since, seen=seen)
    stats = dashboard.window_stats(since, now, seen=seen)
    counts = dashboard.overview_counts(since, counted=stats.by_verdict, seen=seen, pending=stats.in_progress)
    # Settled verdicts (spec v1.2): a handoff in progress is no problem (yet), in the stats as on the tiles.
    in_progress = dict(counts)[dashboard.IN_PROGRESS]
    stats.problem_handoffs = max(stats.problem_handoffs - in_progress, 0)
    open_waits, open_false = dashboard.open_totals(seen=seen)
    return {
        "team_switch": team_switch(user, seen, {"window": window} if window != labels.DEFAULT_WINDOW else {}),
        "team": seen.team,
        "window": window,
        "windows": [(key, label) for key, (label, _) in labels.WINDOWS.items()],
        "health_counts": health_counts,
        "status_counts": status_counts,
        "stats": stats,
        # The window's handoffs, like the "Over time" card (a long window's come with its stats, from the rollup).
        "counts": counts,
        "window_label": labels.WINDOWS[window][0],
        "newest": dashboard.newest_handoffs(seen=seen),
        "soonest": with_offers(dashboard.open_waits(limit=dashboard.SOONEST_LIMIT, seen=seen), user),
        "open_wait_count": open_waits,
        "false_completions": dashboard.false_completions(limit=dashboard.SOONEST_LIMIT, seen=seen),
        "false_count": open_false,
        "now": timezone.now(),
    }
