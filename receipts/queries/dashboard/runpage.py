"""What a run's page reads: its handoffs in order with their boundary grids, missing context keys, reports."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Max, Min

from receipts.ingest import health as run_health
from receipts.models import ContractVersion, Handoff, MiddlewareReport, Receipt, Run
from receipts.queries.compiled import Compiled, slot
from receipts.verdicts import BOUNDARIES

# Which receipt part proves each boundary (its arrival time is shown in the grid).
BOUNDARY_PARTS: dict[str, tuple[str, ...]] = {
    "route": ("created", "reduced"),
    "control": ("reduced",),
    "tool_protocol": ("reduced",),
    "context": ("reduced",),
    "destination": ("destination",),
    "wait": ("wait", "final_status"),
    "outcome": ("verification", "final_status"),
}
assert tuple(BOUNDARY_PARTS) == BOUNDARIES

TIMELINE_LIMIT = 100
REPORT_LIMIT = 100


@dataclass(frozen=True)
class BoundaryCell:
    name: str
    status: str
    at: datetime | None


@dataclass
class HandoffView:
    """A handoff with its boundary grid, ready for a template."""

    handoff: Handoff
    grid: list[BoundaryCell] = field(default_factory=list)


def run_timeline(run: Run, limit: int = TIMELINE_LIMIT, page: int = 1) -> list[HandoffView]:
    """The run's handoffs in the order they were created, each with its grid: the latest `limit` on page 1,
    the `limit` before those on page 2, and so on.

    The run row is read in the same statement as the handoffs (one snapshot: the health that row stores was
    computed from exactly these verdicts) and every handoff's `run` is that one object: a page shows it, not
    the `run` it was given, which may be older (read before a receipt committed).
    """
    compiled = _timeline_query(limit, (max(page, 1) - 1) * limit)
    with compiled.send(run=run.pk) as cursor:
        fetched = cursor.fetchall()
    # Every row carries the same run: one object for the page, built from the first row (the others' copies,
    # a run instance per handoff, were a tenth of the live run page's render CPU).
    recent = compiled.instances(fetched[:1]) + compiled.instances(fetched[1:], related=False)
    recent.reverse()
    for handoff in recent:
        handoff.run = recent[-1].run
    return [HandoffView(h, grid) for h, grid in zip(recent, boundary_grids(recent), strict=True)]


@functools.lru_cache(maxsize=64)
def _timeline_query(limit: int, start: int) -> Compiled:
    """`run_timeline`'s statement for one page, compiled once per process (the run is its slot)."""
    rows = Handoff.objects.filter(run=slot("run")).select_related("run").order_by("-created_at", "-pk")
    return Compiled.of(rows[start : start + limit])


def missing_context_keys(handoffs: Iterable[Handoff]) -> dict[int, list[str]]:
    """Per context-incomplete handoff, the keys its route contract requires that its context lacks.

    The same rule as the classifier (receipts.verdicts: the contract's list wins over what the created
    receipt claims), answered with names rather than a count; one query, none without such handoffs.
    """
    incomplete = [h for h in handoffs if h.verdict == "CONTEXT_INCOMPLETE"]
    if not incomplete:
        return {}
    created = {h.pk: h.created_part or {} for h in incomplete}
    versions = {c.get("route_version") or h.route_version for h, c in zip(incomplete, created.values(), strict=True)}
    routes = dict(ContractVersion.objects.filter(version__in=versions).values_list("version", "routes"))
    missing = {}
    for h in incomplete:
        part = created[h.pk]
        sender, receiver = part.get("sender") or h.sender, part.get("receiver") or h.receiver
        required = (routes.get(part.get("route_version") or h.route_version) or {}).get(sender, {}).get(receiver)
        if required is None:
            required = part.get("required_context_keys") or []
        present = set((h.reduced_part or {}).get("context_keys") or [])
        missing[h.pk] = [key for key in required if key not in present]
    return missing


def run_handoff_count(run: Run) -> int:
    return Handoff.objects.filter(run=run).count()


def handoff_view(handoff: Handoff) -> HandoffView:
    return HandoffView(handoff, boundary_grids([handoff])[0])


def boundary_grids(handoffs: Iterable[Handoff]) -> list[list[BoundaryCell]]:
    """Per handoff, each boundary's status and when the receipt proving it arrived; one query.

    The deciding boundary of a handoff in progress is "waiting" (for its due part), not "fail", and so is the wait
    boundary of a handoff whose wait is open, whichever boundary decided its verdict. Each handoff
    gets `first_arrived` (part -> when its first receipt arrived), which dates a verdict in progress.
    """
    handoffs = list(handoffs)
    arrived: dict[tuple[int, str], datetime] = {}
    first: dict[int, dict[str, datetime]] = {}
    for row in (
        Receipt.objects.filter(handoff__in=[h.pk for h in handoffs])
        .order_by()
        .values("handoff_id", "part")
        .annotate(at=Max("recorded_at"), first=Min("recorded_at"))
    ):
        arrived[(row["handoff_id"], row["part"])] = row["at"]
        first.setdefault(row["handoff_id"], {})[row["part"]] = row["first"]
    grids = []
    for handoff in handoffs:
        handoff.first_arrived = first.get(handoff.pk, {})
        due = run_health.due_part(handoff)
        grid = []
        for name, parts in BOUNDARY_PARTS.items():
            status = handoff.boundaries.get(name, "not_reached")
            if due and name == handoff.boundary and status == "fail":
                status = "waiting"
            if name == "wait" and status == "not_reached" and handoff.wait_open:
                status = "waiting"  # the open wait's card is below: its boundary is waiting, not unreached
            # A boundary after the deciding one was not judged: no receipt time to show for it.
            times = [] if status == "not_reached" else [arrived[k] for p in parts if (k := (handoff.pk, p)) in arrived]
            grid.append(BoundaryCell(name, status, max(times, default=None)))
        grids.append(grid)
    return grids


def run_reports(run: Run, limit: int = REPORT_LIMIT) -> list[MiddlewareReport]:
    """The run's middleware reports, newest first: not its timed tool calls (the timeline and history show them)."""
    rows = MiddlewareReport.objects.filter(run=run).exclude(kind=MiddlewareReport.Kind.TOOL_CALL)
    return list(rows.order_by("-recorded_at", "-pk")[:limit])


@dataclass(frozen=True)
class ReportGroup:
    """Identical middleware reports of one run (same agent, kind and detail), counted."""

    pk: int
    agent: str
    kind: str
    detail: dict
    count: int
    recorded_at: datetime


def run_report_groups(run: Run, limit: int = REPORT_LIMIT) -> list[ReportGroup]:
    """The run's middleware reports, identical ones (agent, kind, detail) grouped with a count; newest first.

    Not its timed tool calls: one a call, they would crowd the reports out (the timeline and history show them)."""
    rows = (
        MiddlewareReport.objects.filter(run=run)
        .exclude(kind=MiddlewareReport.Kind.TOOL_CALL)
        .order_by()
        .values("agent", "kind", "detail")
        .annotate(n=Count("pk"), last=Max("recorded_at"), first=Min("pk"))
        .order_by("-last", "-first")[:limit]
    )
    return [ReportGroup(r["first"], r["agent"], r["kind"], r["detail"], r["n"], r["last"]) for r in rows]
