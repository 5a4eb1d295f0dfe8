"""What each operator page shows, shared by the views and the WebSocket consumer.

A page is described by a `PageScope` (which page, which run, which filters).
The view renders the page or, for htmx requests, its fragment; the consumer
renders the same fragment templates as out-of-band swaps, from the database,
on connect and after events. One source of markup, one source of truth.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qs, urlencode

from django import forms
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef
from django.http import QueryDict
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from agents.limits import effective_stack
from receipts import actions, dashboard
from receipts.models import AuditEntry, Handoff, MiddlewareReport, Run
from receipts.runtime import current as current_runtime
from sidewisp import labels

VIEWER_PERMISSION = "receipts.view_dashboard"
RUNS_PER_PAGE = 25
AUDIT_PER_PAGE = 50
AUDIT_CSV_LIMIT = 10_000
PAGES = ("overview", "runs", "run", "waits", "false")


class RunFilterForm(forms.Form):
    verdict = forms.ChoiceField(required=False, choices=[("", "Any verdict")])
    agent = forms.CharField(required=False, max_length=200, help_text="Sender or receiver")
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *Run.Status.choices], label="Task status")
    since = forms.DateTimeField(required=False, label="Created from (UTC)")
    until = forms.DateTimeField(required=False, label="Created before (UTC)")
    q = forms.CharField(required=False, max_length=200, label="Operation id")
    health = forms.ChoiceField(required=False, choices=[("", "Any health")], label="Run health")
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["verdict"].choices = [("", "Any verdict")] + [
            (v, labels.VERDICTS[v][1]) for v in dashboard.VERDICT_ORDER
        ]
        self.fields["health"].choices = [("", "Any health")] + [(k, v[1]) for k, v in labels.HEALTH.items()]
        for name in ("since", "until"):
            self.fields[name].widget.input_type = "datetime-local"

    def filters(self) -> dashboard.RunFilters:
        """The valid filters; an invalid field is ignored (and shown as an error by the form)."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        names = ("verdict", "agent", "status", "since", "until", "q", "health")
        return dashboard.RunFilters(**{n: data[n] for n in names if data.get(n) not in (None, "")})


@dataclass(frozen=True)
class PageScope:
    page: str
    run_id: int | None = None
    mine: bool = False
    query: str = ""  # the runs page's own query string (filters and page number)

    @classmethod
    def from_query_string(cls, raw: bytes | str) -> PageScope | None:
        """The scope a socket asked for (`?page=run&run=12`), or None when it makes no sense."""
        text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
        params = {k: v[0] for k, v in parse_qs(text).items()}
        page = params.pop("page", "")
        if page not in PAGES:
            return None
        run_id = params.pop("run", "")
        if page == "run":
            return cls(page, run_id=int(run_id)) if run_id.isdigit() else None
        if page == "waits":
            return cls(page, mine=params.get("mine") == "1")
        if page in ("runs", "overview"):
            return cls(page, query=params.get("filters", ""))
        return cls(page)

    def ws_url(self) -> str:
        params: dict[str, str] = {"page": self.page}
        if self.run_id is not None:
            params["run"] = str(self.run_id)
        if self.mine:
            params["mine"] = "1"
        if self.query:
            params["filters"] = self.query  # the runs page's own query, page number included
        return f"/ws/health/?{urlencode(params)}"

    def is_affected_by(self, event: Mapping) -> bool:
        if self.page == "run":
            return event.get("run") == self.run_id
        if self.page in ("waits", "false"):
            return event.get("type") == "handoff.changed"
        return True


# --- context builders: one per page, a fixed number of queries each -------------


def overview_context(window: str = "") -> dict:
    window = window if window in labels.WINDOWS else labels.DEFAULT_WINDOW
    now = timezone.now()
    since = now - timedelta(seconds=labels.WINDOWS[window][1])
    health_counts, status_counts = dashboard.run_status_counts(since)
    return {
        "window": window,
        "windows": [(key, label) for key, (label, _) in labels.WINDOWS.items()],
        "health_counts": health_counts,
        "status_counts": status_counts,
        "stats": dashboard.window_stats(since, now),
        "counts": dashboard.overview_counts(),
        "newest": dashboard.newest_handoffs(),
        "soonest": with_offers(dashboard.open_waits(limit=dashboard.SOONEST_LIMIT)),
        "open_wait_count": dashboard.open_wait_count(),
        "false_completions": dashboard.false_completions(limit=dashboard.SOONEST_LIMIT),
        "false_count": dashboard.false_completion_count(),
        "now": timezone.now(),
    }


def runs_context(params: QueryDict | Mapping[str, str]) -> dict:
    form = RunFilterForm(params)
    filters = form.filters()
    paginator = Paginator(dashboard.runs(filters).annotate(no_handoff=_has_report(NO_HANDOFF)), RUNS_PER_PAGE)
    page = paginator.get_page(form.cleaned_data.get("page") or 1)
    query = {k: v for k, v in _flat(params).items() if k != "page" and v}
    return {"form": form, "page_obj": page, "query": urlencode(query), "filtered": bool(query)}


def run_context(run: Run) -> dict:
    timeline = dashboard.run_timeline(run)
    stoppable = any(item.handoff.verdict in actions.STOPPABLE for item in timeline)
    offers = run_offers(run, stoppable=stoppable)
    for item in timeline:
        item.handoff.evidence = reconcile_evidence(item.handoff)
        item.handoff.offers = offers
    # Identical reports grouped with a count (a zero call limit repeats one report per attempt).
    reports = dashboard.run_report_groups(run)
    return {
        "run": run,
        "offers": offers,
        # Recorded once, when the run ends: among the newest reports (no query of its own).
        "no_handoff": any(report.kind == NO_HANDOFF for report in reports),
        "timeline": timeline,
        "stoppable": stoppable,
        "held_decisions": run.decisions.filter(applied_at__isnull=True).count() if not run.auto_continue else 0,
        "handoff_count": dashboard.run_handoff_count(run),
        "reports": reports,
        "effective_limits": effective_stack(run),
        "timeline_limit": dashboard.TIMELINE_LIMIT,
        "now": timezone.now(),
    }


def waits_context(username: str | None) -> dict:
    return {"waits": with_offers(dashboard.open_waits(username)), "mine": username is not None, "now": timezone.now()}


def false_context() -> dict:
    return {"false_completions": dashboard.false_completions(), "false_count": dashboard.false_completion_count()}


# --- what each run offers: decided here, once, for every page ----------------------

NO_HANDOFF = MiddlewareReport.Kind.NO_HANDOFF


@dataclass(frozen=True)
class Offers:
    """Which actions the pages offer for one run, and in words why the others are not offered.

    A page never offers a button the action could only refuse: the runtime
    answers what can reach the run's graph, the run's state the rest.
    """

    resumer: str  # who resumes the run after a decision, as a sentence
    observed: bool
    decide: bool  # approve, reject, edit
    reverify: bool  # reopen a false completion
    reverify_note: str
    controllable: bool  # auto-continue can be stopped and lifted (state rules aside)
    stop: bool
    resume: bool
    drive_note: str

    def allows(self, what: str) -> bool:
        """Whether the action `what` (a confirmation page's name) can work on this run at all."""
        if what in actions.DECISION_KINDS:
            return self.decide
        if what == "reopen":
            return self.reverify
        if what in ("stop", "resume"):
            return self.controllable
        return True

    def why_not(self, what: str) -> str:
        if what in actions.DECISION_KINDS:
            return f"A decision cannot reach this run's graph. {self.resumer}"
        return self.reverify_note if what == "reopen" else self.drive_note


def run_offers(run: Run, *, stoppable: bool = False) -> Offers:
    runtime = current_runtime()
    # An imported run is neither: no process drives it.
    observed = run.mode == Run.Mode.OBSERVED and run.source == Run.Source.AGENT
    drivable = runtime.can_drive(run)
    # Stopping works in both modes: a worker (hosted) and the app's observe (observed) both check
    # auto-continue before every step and park the run. Resuming differs: for a hosted run a worker
    # drives it on; for an observed run it only lifts the stop (observe parks at once while it is
    # off), so it is still offered, worded as such, and the app continues when it calls observe again.
    if observed:
        drive_note = (
            "This run is driven by the app's own process. Stopping auto-continue works: the app's observe "
            "checks it before every step and parks the run. Sidewisp cannot continue the run itself: once the "
            "stop is lifted, the app continues it when it calls observe again."
        )
    elif not drivable:
        drive_note = "No Sidewisp worker can drive this run here: Sidewisp cannot stop or continue it."
    else:
        drive_note = ""
    reverify = runtime.can_reverify(run)
    if reverify:
        reverify_note = ""
    elif observed:
        reverify_note = "Its outcome verifier runs in the app's process; Sidewisp cannot run it again."
    else:
        reverify_note = "No outcome verifier is registered for this run here; Sidewisp cannot run it again."
    controllable = drivable or observed
    return Offers(
        resumer=runtime.resumer(run),
        observed=observed,
        decide=runtime.can_resume(run),
        reverify=reverify,
        reverify_note=reverify_note,
        controllable=controllable,
        stop=run.auto_continue and stoppable and controllable,
        resume=not run.auto_continue and controllable,
        drive_note=drive_note,
    )


def with_offers(handoffs: list[Handoff]) -> list[Handoff]:
    """`handoffs` (their runs loaded), each with its run's offers as `offers` (asked once per run)."""
    by_run: dict[int, Offers] = {}
    for handoff in handoffs:
        if handoff.run_id not in by_run:
            by_run[handoff.run_id] = run_offers(handoff.run)
        handoff.offers = by_run[handoff.run_id]
    return handoffs


def _has_report(kind: str) -> Exists:
    return Exists(MiddlewareReport.objects.filter(run=OuterRef("pk"), kind=kind))


# --- operator actions -----------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """A stale-control or open-tool-protocol handoff's evidence side by side: declared vs what the state says."""

    receiver: str
    route_version: str
    required_keys: list[str]
    tool_call_id: str
    goto: str
    active_before: str
    active_after: str
    context_keys: list[str]
    tool_message_ids: list[str]
    sender: str

    @property
    def open_tool_call(self) -> str:
        return self.tool_call_id if self.tool_call_id and self.tool_call_id not in self.tool_message_ids else ""

    @property
    def missing_keys(self) -> list[str]:
        return [k for k in self.required_keys if k not in self.context_keys]


def reconcile_evidence(handoff: Handoff) -> Evidence | None:
    if handoff.verdict not in actions.STOPPABLE:
        return None
    created, reduced = handoff.created_part or {}, handoff.reduced_part or {}
    return Evidence(
        receiver=created.get("receiver") or "",
        route_version=created.get("route_version") or "",
        required_keys=list(created.get("required_context_keys") or []),
        tool_call_id=created.get("tool_call_id") or "",
        goto=reduced.get("goto") or "",
        active_before=reduced.get("active_agent_before") or "",
        active_after=reduced.get("active_agent_after") or "",
        context_keys=list(reduced.get("context_keys") or []),
        tool_message_ids=list(reduced.get("tool_message_ids") or []),
        sender=created.get("sender") or "",
    )


def pending_call(run: Run):
    """The tool call an approval resumes (names only), read from the durable graph; None if unreadable."""
    from receipts.runtime import current

    try:
        return current().pending_call(run)
    except Exception:  # noqa: BLE001 - a confirmation page says "unknown" rather than failing
        return None


ACTION_URLS = {
    "approve": "sidewisp:wait-decide",
    "reject": "sidewisp:wait-decide",
    "edit": "sidewisp:wait-decide",
    "reassign": "sidewisp:wait-reassign",
    "cancel": "sidewisp:wait-cancel",
    "reopen": "sidewisp:task-reopen",
    "stop": "sidewisp:run-stop",
    "resume": "sidewisp:run-resume",
}


def confirm_context(what: str, found: actions.Result, form) -> dict:
    handoff, run = found.handoff, found.run
    pending = pending_call(run) if what in actions.DECISION_KINDS else None
    target = handoff if handoff is not None else run
    offers = run_offers(run)
    if what == "reassign":
        candidates = actions.wait_owner_candidates(handoff, by=found.actor)
        form.offer_owners(candidate.get_username() for candidate in candidates)
    return {
        "what": what,
        "offers": offers,
        "offered": offers.allows(what),
        "not_offered": offers.why_not(what),
        "action_url": reverse(ACTION_URLS[what], args=[target.pk]),
        "handoff": handoff,
        "run": run,
        "form": form,
        "pending": pending,
        "edit_allowed": pending is not None and "edit" in pending.allowed_decisions,
        "evidence": reconcile_evidence(handoff) if handoff is not None else None,
        "now": timezone.now(),
    }


def result_context(result: actions.Result, user) -> dict:
    context: dict = {"result": result, "now": timezone.now()}
    if result.run is not None and result.ok and user.has_perm(VIEWER_PERMISSION):
        # The run, live: the operator watches the resume, re-verification or parking happen.
        context.update(run_context(result.run))
        context["ws_url"] = PageScope("run", run_id=result.run.pk).ws_url()
    return context


class AuditQuery:
    def __init__(self, params: QueryDict | Mapping[str, str]) -> None:
        from sidewisp.forms import AuditFilterForm

        names = sorted(set(AuditEntry.objects.order_by().values_list("action", flat=True).distinct()))
        self.form = AuditFilterForm(params, actions=names)
        self.entries = AuditEntry.objects.filter(**self.form.filters()).order_by("-at", "-pk")


def audit_context(params: QueryDict | Mapping[str, str]) -> dict:
    query = AuditQuery(params)
    page = Paginator(query.entries.select_related("run"), AUDIT_PER_PAGE).get_page(
        query.form.cleaned_data.get("page") or 1
    )
    filters = {k: v for k, v in _flat(params).items() if k != "page" and v}
    return {"form": query.form, "page_obj": page, "query": urlencode(filters)}


AUDIT_COLUMNS = ("at", "actor", "action", "object_type", "object_id", "run", "verdict", "outcome", "reason")


def audit_csv_rows(params: QueryDict | Mapping[str, str]) -> Iterable[list[str]]:
    yield list(AUDIT_COLUMNS)
    entries = AuditQuery(params).entries.select_related("run")[:AUDIT_CSV_LIMIT]
    for e in entries.iterator(chunk_size=500):
        row = [
            e.at.isoformat(),
            e.actor_name,
            e.action,
            e.object_type,
            e.object_id,
            e.run.operation_id if e.run else "",
            e.verdict,
            e.outcome,
            e.reason,
        ]
        yield [_csv_safe(value) for value in row]


def _csv_safe(value: str) -> str:
    # A cell starting with = + - @ is a formula in a spreadsheet: never let a reason run as one.
    return f"'{value}" if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


class Echo:
    """A file-like object whose write returns the line (csv.writer into a streaming response)."""

    def write(self, value: str) -> str:
        return value


def _flat(params: QueryDict | Mapping[str, str]) -> dict[str, str]:
    return params.dict() if isinstance(params, QueryDict) else dict(params)


# --- out-of-band fragments for the socket ---------------------------------------

# The fragments each page swaps live, by template; each has a stable id.
_FRAGMENTS: dict[str, tuple[str, ...]] = {
    "overview": (
        "sidewisp/_run_status.html",
        "sidewisp/_window.html",
        "sidewisp/_counts.html",
        "sidewisp/_newest.html",
        "sidewisp/_soonest.html",
        "sidewisp/_false_short.html",
    ),
    "runs": ("sidewisp/_runs_list.html",),
    "run": ("sidewisp/_run.html",),
    "waits": ("sidewisp/_waits.html",),
    "false": ("sidewisp/_false_completions.html",),
}


def _context_for(scope: PageScope, username: str) -> dict | None:
    builders: dict[str, Callable[[], dict | None]] = {
        "overview": lambda: overview_context(QueryDict(scope.query).get("window") or ""),
        "runs": lambda: runs_context(QueryDict(scope.query)),
        "run": lambda: _run_context_or_none(scope.run_id),
        "waits": lambda: waits_context(username if scope.mine else None),
        "false": false_context,
    }
    return builders[scope.page]()


def _run_context_or_none(run_id: int | None) -> dict | None:
    run = Run.objects.filter(pk=run_id).first()
    return run_context(run) if run is not None else None


def change_marker(scope: PageScope) -> tuple:
    return dashboard.change_marker(scope.run_id if scope.page == "run" else None)


def render_oob(scope: PageScope, username: str, seqs: Iterable[tuple[int, list[int]]], *, snapshot: bool) -> str:
    """The page's live fragments as out-of-band swaps, then the sequence marker the page script reads.

    `seqs` are (run id, [event sequence numbers]) seen since the last render; a
    snapshot also carries the run's current sequence so the page has a baseline.
    """
    context = _context_for(scope, username)
    if context is None:
        return ""
    context["oob"] = True
    seqs = [[run, sorted(numbers)] for run, numbers in seqs]
    if snapshot and scope.page == "run":
        seqs = [[context["run"].pk, [context["run"].seq]]]
    parts = [render_to_string(template, context) for template in _FRAGMENTS[scope.page]]
    marker = {"kind": "snapshot" if snapshot else "events", "seqs": seqs}
    parts.append(render_to_string("sidewisp/_ws_seq.html", {"marker": json.dumps(marker), "oob": True}))
    return "\n".join(parts)
