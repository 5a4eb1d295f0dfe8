"""Small presentation helpers for the operator pages (escaping stays with the template engine)."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

from sidewisp import labels

register = template.Library()


@register.inclusion_tag("sidewisp/_verdict.html")
def verdict(code: str) -> dict:
    icon, label, tone = labels.VERDICTS.get(code, labels.UNKNOWN)
    return {"icon": icon, "label": label, "tone": tone, "code": code}


@register.inclusion_tag("sidewisp/_state.html")
def boundary_state(state: str) -> dict:
    icon, label = labels.STATES.get(state, labels.UNKNOWN[:2])
    return {"icon": icon, "label": label, "state": state}


@register.filter
def boundary_label(name: str) -> str:
    return labels.BOUNDARIES.get(name, name)


@register.filter
def verdict_label(code: str) -> str:
    return labels.VERDICTS.get(code, labels.UNKNOWN)[1]


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
