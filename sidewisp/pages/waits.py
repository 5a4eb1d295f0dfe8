"""The open waits page, and a wait's story: when it opened and, once resolved, who decided what, when."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.core.paginator import Paginator
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from receipts.actions import DECIDE_ANY, DECIDE_OWN, User
from receipts.models import AuditEntry, Handoff, Receipt
from receipts.org import teams
from receipts.queries import dashboard
from sidewisp.pages.decisions import mark_expiring
from sidewisp.pages.inbox import NOT_RECORDED, batch_tools, with_calls
from sidewisp.pages.offers import with_offers
from sidewisp.pages.scope import team_switch

WAITS_PER_PAGE = 25


def waits_context(user: User, *, mine: bool = False, page: object = 1, team: str = "") -> dict:
    # The team's names read once (one query): the count of open waits then filters their runs by a few names
    # instead of evaluating the scope's subqueries on every run (a scan of all runs, 50 ms at 50k).
    seen = teams.scope_for(user, team).resolved()
    username = user.get_username() if mine else None
    # When each wait opened (its first wait receipt), in the list's own query (issue 30 §3: how long it waited).
    first_wait = Receipt.objects.filter(handoff=OuterRef("pk"), part="wait").order_by("recorded_at", "pk")
    listed = dashboard.open_waits_query(username, seen=seen).annotate(
        opened_at=Subquery(first_wait.values("recorded_at")[:1])
    )
    page_obj = Paginator(listed, WAITS_PER_PAGE)
    page_obj = page_obj.get_page(page)
    waits = list(page_obj.object_list)
    resolved = resolved_waits(username, seen=seen)
    return {
        "team_switch": team_switch(user, seen, {"mine": "1"} if mine else {}),
        "team": seen.team,
        "waits": with_calls(with_offers(waits, user)),
        "batch_tools": batch_tools(waits),
        "inbox": True,
        "may_decide": user.has_perm(DECIDE_OWN) or user.has_perm(DECIDE_ANY),
        "not_recorded": NOT_RECORDED,
        "page_obj": page_obj,
        "query": urlencode({k: v for k, v in (("mine", "1" if mine else ""), ("team", team)) if v}),
        "resolved": resolved,
        "mine": mine,
        "now": timezone.now(),
    }


RESOLVED_LIMIT = 20
# The audit actions that close a wait, and the resolution each records (spec §1 v1.1).
CLOSING_ACTIONS = {
    "wait.approve": "approved",
    "wait.edit": "edited",
    "wait.reject": "rejected",
    "wait.expire": "expired",
    "wait.cancel": "cancelled",
}


@dataclass(frozen=True)
class WaitStory:
    """What happened to a wait: when it opened and, once resolved, how, by whom, when, after how long."""

    opened_at: object | None  # datetime
    resolution: str = ""  # approved | edited | rejected | expired | cancelled ("" while open)
    decided_by: str = ""
    decided_at: object | None = None
    closed_at: object | None = None

    @property
    def open_for(self) -> str:
        """How long the wait was (or has been, while open) open, e.g. "2h 05m"; "" when unknown."""
        end = self.closed_at or self.decided_at or timezone.now()
        if self.opened_at is None or end < self.opened_at:
            return ""
        seconds = int((end - self.opened_at).total_seconds())
        days, hours, minutes = seconds // 86400, seconds % 86400 // 3600, seconds % 3600 // 60
        if days:
            return f"{days}d {hours}h"
        return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {seconds % 60:02d}s"


def resolved_waits(username: str | None = None, *, seen: teams.Scope = teams.EVERYTHING) -> list[Handoff]:
    """The most recently resolved waits (`username`'s only when given), each with its story."""
    found = Handoff.objects.select_related("run").filter(wait_open=False, wait_part__isnull=False)
    found = seen.apply(found, "run__")
    if username is not None:
        found = found.filter(wait_owner=username)
    handoffs = list(found.order_by("-updated_at", "-pk")[:RESOLVED_LIMIT])
    mark_expiring(handoffs)
    return with_stories(handoffs)


def with_stories(handoffs: list[Handoff]) -> list[Handoff]:
    """`handoffs`, each with a wait gets `story` (two queries, none without waits)."""
    waiting = [h for h in handoffs if h.wait_part]
    if not waiting:
        return handoffs
    opened: dict[int, object] = {}
    closed: dict[int, object] = {}
    for handoff_id, payload, at in (
        Receipt.objects.filter(handoff__in=waiting, part="wait")
        .order_by("recorded_at", "pk")
        .values_list("handoff_id", "payload", "recorded_at")
    ):
        if isinstance(payload, dict) and payload.get("resolved") is True:
            closed.setdefault(handoff_id, at)
        else:
            opened.setdefault(handoff_id, at)
    decided: dict[int, AuditEntry] = {}
    closed_ones = [h for h in waiting if not h.wait_open]
    if closed_ones:
        entries = AuditEntry.objects.filter(
            handoff__in=closed_ones, action__in=list(CLOSING_ACTIONS), outcome=AuditEntry.Outcome.DONE
        ).order_by("-at", "-pk")
        for entry in entries:
            decided.setdefault(entry.handoff_id, entry)
    for h in waiting:
        entry = decided.get(h.pk)
        resolution = "" if h.wait_open else (h.wait_part.get("resolution") or "")
        if not h.wait_open and not resolution and entry is not None:
            resolution = CLOSING_ACTIONS[entry.action]
        h.story = WaitStory(
            opened_at=opened.get(h.pk),
            resolution=resolution or ("" if h.wait_open else "resolved"),
            decided_by=(entry.actor_name if entry is not None else "") if not h.wait_open else "",
            decided_at=entry.at if entry is not None and not h.wait_open else None,
            closed_at=closed.get(h.pk) if not h.wait_open else None,
        )
    return handoffs
