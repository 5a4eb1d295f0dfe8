"""Small presentation helpers for the operator pages (escaping stays with the template engine)."""

from __future__ import annotations

from datetime import UTC, datetime

from django import template
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince, timeuntil

from receipts.ingest import health
from receipts.queries.dashboard import IN_PROGRESS as IN_PROGRESS_TILE
from sidewisp.pages import glossary, labels

register = template.Library()


@register.simple_tag
def verdict(code: str, run_health: str = "", handoff=None, due: str = "", linked: bool = True) -> str:
    """A handoff's verdict; given its run's health, a healthy handoff of an alarming run is not green."""
    return _badge(**_verdict_facts(code, run_health, handoff, due, linked))


def _verdict_facts(code: str, run_health: str, handoff, due: str, linked: bool) -> dict:
    """What a verdict's badge shows.

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


@register.simple_tag
def wait_verdict(handoff) -> str:
    """A wait's badge: a rejected, expired or cancelled one says so (and who rejected it), never ✔; else its verdict."""
    story = getattr(handoff, "story", None)
    resolution = story.resolution if story is not None and not handoff.wait_open else ""
    if resolution not in labels.WAIT_OUTCOMES:
        return verdict(handoff.verdict, handoff.run.health, handoff)
    icon, label, tone = labels.WAIT_OUTCOMES[resolution]
    if resolution == "rejected" and story.decided_by:
        label = f"{label} by {story.decided_by}"
    href = reverse("sidewisp:glossary") + "#wait-outcomes"
    return _badge(icon=icon, label=label, tone=tone, code=handoff.verdict, outcome=resolution, href=href)


# Badges are built here rather than by inclusion tags with a template each: the overview shows forty, and an
# inclusion tag's context and template render cost several times this (issue 32 §4).
def _badge(*, icon: str, label: str, tone: str, code: str, href: str = "", due: str = "", outcome: str = "") -> str:
    """A verdict's badge: a link to its glossary entry when `href` is given."""
    badge = format_html(
        '<span class="verdict tone-{}" data-verdict="{}"{}{}><span class="icon" aria-hidden="true">{}</span> {}</span>',
        tone,
        code,
        format_html(' data-in-progress="{}"', due) if due else "",
        format_html(' data-outcome="{}"', outcome) if outcome else "",
        icon,
        label,
    )
    return format_html('<a class="verdict-link" href="{}">{}</a>', href, badge) if href else badge


# The dry-run mark of `_dry.html`, for rows that show it without an include (a list of handoffs: one a row).
DRY_MARK = mark_safe(
    '<span class="dry" title="Dry run: no external action was taken"><span aria-hidden="true">◌</span> dry run</span>'
)


@register.simple_tag
def dry_mark(run) -> str:
    """A dry run's mark (what `_dry.html` shows), "" for any other run."""
    return DRY_MARK if run.dry_run else ""


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


@register.simple_tag
def run_health(run, reasons: bool = False) -> str:
    """The run's stored health as a badge (and, with `reasons`, its named reasons); no query."""
    icon, label, tone = labels.HEALTH.get(run.health, labels.HEALTH_UNKNOWN)
    badge = format_html(
        '<span class="verdict health tone-{}" data-health="{}"><span class="icon" aria-hidden="true">{}</span> '
        '<span class="health-label">Run: {}</span></span>\n',  # the newline the badge's template ended with
        tone,
        run.health or "unknown",
        icon,
        label,
    )
    shown = run.health_reasons if reasons else []
    if not shown:
        return badge
    items = format_html_join(
        "",
        '<li class="reason tone-{}" data-reason="{}">{}</li>',
        ((REASON_TONES.get(r.get("level"), "muted"), r.get("code", ""), r.get("text", "")) for r in shown),
    )
    return format_html('{}<ul class="health-reasons" aria-label="Why">{}</ul>\n', badge, items)


REASON_TONES = {"failing": "bad", "attention": "warn", "waiting": "wait"}  # any other level: muted


@register.filter
def run_next_move(run) -> str:
    """A failed run's safe next move when none of its handoffs gives one (health.run_next_move); no query."""
    return health.run_next_move(run.health_reasons or []) if run.health in health.ALARMING else ""


@register.simple_tag
def boundary_state(state: str) -> str:
    icon, label = labels.STATES.get(state, labels.UNKNOWN[:2])
    return format_html(
        '<span class="state state-{}"><span class="icon" aria-hidden="true">{}</span> {}</span>', state, icon, label
    )


@register.filter
def boundary_label(name: str) -> str:
    return labels.BOUNDARIES.get(name, name)


@register.filter
def verdict_label(code: str) -> str:
    return labels.verdict_words(code)


# `moment` and `countdown` are simple tags that build their few elements here rather than inclusion tags with a
# template each: a page shows dozens of times, and an inclusion tag's context and template render cost about
# ten times this (issue 32 §4: a runs list's 25 rows spent 3 ms of CPU in them).
NO_TIME = mark_safe('<span class="muted">—</span>')
NO_DEADLINE = mark_safe('<span class="warn-text"><span aria-hidden="true">⚠</span> no deadline</span>')


def _utc_parts(value: datetime) -> tuple[str, str]:
    """The ISO time a script reads (`datetime=`) and the UTC time a person reads ("2026-01-02 03:04:05")."""
    utc = value.astimezone(UTC)
    return utc.isoformat(), utc.replace(tzinfo=None).isoformat(sep=" ", timespec="seconds")


@register.simple_tag
def moment(value: datetime | None) -> str:
    """A time shown relative and absolute (UTC); the page script adds the viewer's zone."""
    if not value:
        return NO_TIME
    now = timezone.now()
    relative = f"in {timeuntil(value, now)}" if value > now else f"{timesince(value, now)} ago"
    iso, shown = _utc_parts(value)
    return format_html(
        '<time class="moment" datetime="{}" title="{} UTC">{}</time> '
        '<span class="abs">{} UTC<span class="local-time"></span></span>',
        iso,
        shown,
        relative,
        shown,
    )


@register.simple_tag
def countdown(deadline: datetime | None) -> str:
    """How long until a deadline (or how long overdue), with the deadline itself in UTC."""
    if not deadline:
        return NO_DEADLINE
    now = timezone.now()
    overdue = deadline <= now
    text = f"overdue by {timesince(deadline, now)}" if overdue else f"due in {timeuntil(deadline, now)}"
    iso, shown = _utc_parts(deadline)
    return format_html(
        '<time class="countdown{}" datetime="{}">{}</time> '
        '<span class="abs">{} UTC<span class="local-time"></span></span>',
        " overdue" if overdue else "",
        iso,
        text,
        shown,
    )


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
