"""Small presentation helpers for the operator pages (escaping stays with the template engine)."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

from receipts.ingest import health
from receipts.queries.dashboard import IN_PROGRESS as IN_PROGRESS_TILE
from sidewisp.pages import glossary, labels

register = template.Library()


@register.inclusion_tag("sidewisp/_verdict.html")
def verdict(code: str, run_health: str = "", handoff=None, due: str = "", linked: bool = True) -> dict:
    """A handoff's verdict; given its run's health, a healthy handoff of an alarming run is not green.

    A verdict in progress (spec v1.2 Settled: `handoff` given and receipts.ingest.health.due_part names a part, or
    `due` does, or `code` is a run's stored "VERDICT:part") says which part it waits for, never in red.
    """
    code, stored = health.split_latest(code or "")
    due = due or stored or (health.due_part(handoff) or "" if handoff is not None else "")
    if due:
        icon, _, tone = labels.HEALTH[health.IN_PROGRESS]
        words, href = health.in_progress_words(due), glossary.entry_url("") if linked else ""
        return {"icon": icon, "label": words, "tone": tone, "code": code, "due": due, "href": href}
    if code == IN_PROGRESS_TILE:  # the overview's tile of handoffs in progress
        icon, label, tone = labels.HEALTH[health.IN_PROGRESS]
        return {
            "icon": icon,
            "label": label,
            "tone": tone,
            "code": code,
            "href": glossary.entry_url("") if linked else "",
        }
    icon, label, tone = labels.VERDICTS.get(code, labels.UNKNOWN)
    if code == "HEALTHY" and run_health in ("failing", "attention"):
        icon, label, tone = labels.HANDOFF_OK_IN_BAD_RUN
    href = glossary.entry_url(code) if linked and code else ""
    return {"icon": icon, "label": label, "tone": tone, "code": code, "href": href}


@register.inclusion_tag("sidewisp/_verdict.html")
def wait_verdict(handoff) -> dict:
    """A wait's badge: a rejected, expired or cancelled one says so (and who rejected it), never ✔; else its verdict."""
    story = getattr(handoff, "story", None)
    resolution = story.resolution if story is not None and not handoff.wait_open else ""
    if resolution not in labels.WAIT_OUTCOMES:
        return verdict(handoff.verdict, handoff.run.health, handoff)
    icon, label, tone = labels.WAIT_OUTCOMES[resolution]
    if resolution == "rejected" and story.decided_by:
        label = f"{label} by {story.decided_by}"
    href = reverse("sidewisp:glossary") + "#wait-outcomes"
    return {"icon": icon, "label": label, "tone": tone, "code": handoff.verdict, "outcome": resolution, "href": href}


@register.filter
def due_part(handoff) -> str:
    """The part a handoff in progress waits for ("" once its verdict is final): receipts.ingest.health.due_part."""
    return health.due_part(handoff) or ""


@register.filter
def in_progress_words(part: str) -> str:
    """ "In progress — waiting for the reduced receipt" for "reduced"."""
    return health.in_progress_words(part)


@register.filter
def due_words(part: str) -> str:
    """ "the reduced receipt" for "reduced"."""
    return health.DUE_WORDS.get(part, part)


@register.inclusion_tag("sidewisp/_health.html")
def run_health(run, reasons: bool = False) -> dict:
    """The run's stored health as a badge (and, with `reasons`, its named reasons); no query."""
    icon, label, tone = labels.HEALTH.get(run.health, labels.HEALTH_UNKNOWN)
    shown = run.health_reasons if reasons else []
    return {"icon": icon, "label": label, "tone": tone, "level": run.health or "unknown", "reasons": shown}


@register.filter
def run_next_move(run) -> str:
    """A failed run's safe next move when none of its handoffs gives one (health.run_next_move); no query."""
    return health.run_next_move(run.health_reasons or []) if run.health in health.ALARMING else ""


@register.inclusion_tag("sidewisp/_state.html")
def boundary_state(state: str) -> dict:
    icon, label = labels.STATES.get(state, labels.UNKNOWN[:2])
    return {"icon": icon, "label": label, "state": state}


@register.filter
def boundary_label(name: str) -> str:
    return labels.BOUNDARIES.get(name, name)


@register.filter
def verdict_label(code: str) -> str:
    return labels.verdict_words(code)


@register.inclusion_tag("sidewisp/_moment.html")
def moment(value: datetime | None) -> dict:
    """A time shown relative and absolute (UTC); the page script adds the viewer's zone."""
    if value is None:
        return {"value": None}
    now = timezone.now()
    relative = f"in {timeuntil(value, now)}" if value > now else f"{timesince(value, now)} ago"
    return {"value": value, "relative": relative, "utc": value.astimezone(UTC)}


@register.inclusion_tag("sidewisp/_countdown.html")
def countdown(deadline: datetime | None) -> dict:
    if deadline is None:
        return {"deadline": None}
    now = timezone.now()
    overdue = deadline <= now
    text = f"overdue by {timesince(deadline, now)}" if overdue else f"due in {timeuntil(deadline, now)}"
    return {"deadline": deadline, "overdue": overdue, "text": text, "utc": deadline.astimezone(UTC)}


@register.filter
def run_mode(run) -> str:
    return labels.run_mode(run.mode, run.graph)


@register.filter
def report_label(kind: str) -> str:
    return labels.REPORTS.get(kind, kind)


@register.filter
def report_text(report) -> str:
    return labels.report_text(report.kind, report.detail)


@register.filter
def cause_label(cause: str) -> str:
    return labels.CAUSES.get(cause, cause)


@register.filter
def decision_label(kind: str) -> str:
    return labels.DECISIONS.get(kind, kind)


@register.inclusion_tag("sidewisp/_sparkline.html")
def sparkline(values: list[int], label: str) -> dict:
    """A small trend as inline SVG (no script, no chart library): one polyline over equal time buckets."""
    width, height = 120, 28
    top = max(values, default=0) or 1
    step = width / max(len(values) - 1, 1)
    points = " ".join(f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}" for i, v in enumerate(values))
    return {"points": points, "width": width, "height": height, "label": label, "values": values}


@register.filter
def duration(seconds: float | None) -> str:
    """Seconds in words a person reads at a glance: "0.4 s", "12 s", "3.5 min", "2.1 h"."""
    if seconds is None:
        return "—"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


@register.filter
def health_label(level: str) -> str:
    return labels.HEALTH.get(level, labels.HEALTH_UNKNOWN)[1]


@register.simple_tag
def system_banner() -> dict:
    """The system banner's facts (cached worker ping, beat heartbeat): no database query."""
    from sidewisp.ops import health

    return health.banner()
