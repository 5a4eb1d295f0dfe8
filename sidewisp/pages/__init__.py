"""What each operator page shows, shared by the views and the WebSocket consumer.

A page is described by a `PageScope` (which page, which run, which filters).
The view renders the page or, for htmx requests, its fragment; the consumer
renders the same fragment templates as out-of-band swaps, from the database,
on connect and after events. One source of markup, one source of truth.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qs, urlencode

from django import forms
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, Q
from django.http import QueryDict
from django.urls import reverse
from django.utils import timezone

from agents.limits import effective_stack
from receipts import actions
from receipts.ingest import health as run_health
from receipts.models import AuditEntry, Decision, Handoff, MiddlewareReport, Receipt, Run, VerdictChange
from receipts.org import teams
from receipts.queries import dashboard
from receipts.workers.runtime import current as current_runtime
from sidewisp.pages import labels
from sidewisp.web import refusals

VIEWER_PERMISSION = "receipts.view_dashboard"
User = actions.User
RUNS_PER_PAGE = 25
WAITS_PER_PAGE = 25
FALSE_PER_PAGE = 25
AUDIT_PER_PAGE = 50
# Lists served by page number (OFFSET) up to this page; deeper pages go by cursor (`?older=` / `?newer=`).
MAX_NUMBERED_PAGE = 40
# The query parameters that say where in a list a page is (kept out of the links' filter query).
POSITION_PARAMS = ("page", "older", "newer")
PAGES = ("overview", "runs", "run", "waits", "false", "map")


# The time windows the runs list offers: runs created within the last ...
WINDOWS: dict[str, tuple[str, timedelta]] = {
    "15m": ("15 minutes", timedelta(minutes=15)),
    "1h": ("1 hour", timedelta(hours=1)),
    "24h": ("24 hours", timedelta(hours=24)),
    "7d": ("7 days", timedelta(days=7)),
}
HEALTH_LABELS = {
    run_health.FAILING: "Failing",
    run_health.ATTENTION: "Needs attention",
    run_health.WAITING: "Waiting",
    run_health.IN_PROGRESS: "In progress",
    run_health.HEALTHY: "Healthy",
}


class RunFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=200,
        label="Search",
        help_text="Operation id, handoff id, agent or graph; an exact id opens it",
        widget=forms.TextInput(attrs={"type": "search"}),
    )
    health = forms.ChoiceField(required=False, choices=[("", "Any health")], label="Run health")
    window = forms.ChoiceField(
        required=False,
        choices=[("", "Any time"), *((key, f"Last {label}") for key, (label, _) in WINDOWS.items())],
        label="Created in",
    )
    verdict = forms.ChoiceField(required=False, choices=[("", "Any verdict")])
    graph = forms.ChoiceField(required=False, choices=[("", "Any graph")])
    route_version = forms.ChoiceField(required=False, choices=[("", "Any route version")])
    agent = forms.CharField(required=False, max_length=200, help_text="Sender or receiver, exactly")
    # The team map's arrows link here: the runs with a handoff over that one route.
    sender = forms.CharField(required=False, max_length=200, label="From agent", help_text="Sender, exactly")
    receiver = forms.CharField(required=False, max_length=200, label="To agent", help_text="Receiver, exactly")
    status = forms.ChoiceField(required=False, choices=[("", "Any status"), *Run.Status.choices], label="Task status")
    since = forms.DateTimeField(required=False, label="Created from (UTC)")
    until = forms.DateTimeField(required=False, label="Created before (UTC)")
    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_NUMBERED_PAGE, widget=forms.HiddenInput)
    older = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    newer = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(self, *args, graphs: Iterable[str] = (), route_versions: Iterable[str] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["verdict"].choices = [("", "Any verdict")] + [
            (v, labels.VERDICTS[v][1]) for v in dashboard.VERDICT_ORDER
        ]
        self.fields["health"].choices += [(level, HEALTH_LABELS.get(level, level)) for level in run_health.LEVELS]
        self.fields["graph"].choices += [(name, name) for name in graphs]
        self.fields["route_version"].choices += [(version, version) for version in route_versions]
        for name in ("since", "until"):
            self.fields[name].widget.input_type = "datetime-local"

    def filters(self) -> dashboard.RunFilters:
        """The valid filters; an invalid field is ignored (and shown as an error by the form)."""
        self.is_valid()
        data = dict(getattr(self, "cleaned_data", {}))
        data["q"] = (data.get("q") or "").strip()
        if window := WINDOWS.get(data.get("window") or ""):
            start = timezone.now() - window[1]
            data["since"] = max(data["since"], start) if data.get("since") else start
        names = ("verdict", "agent", "status", "since", "until", "q", "graph", "route_version", "health")
        names += ("sender", "receiver")
        return dashboard.RunFilters(**{n: data[n] for n in names if data.get(n) not in (None, "")})


@dataclass(frozen=True)
class PageScope:
    page: str
    run_id: int | None = None
    mine: bool = False
    query: str = ""  # the page's own query string (filters and page number)

    @classmethod
    def from_query_string(cls, raw: bytes | str) -> PageScope | None:
        """The scope a socket asked for (`?page=run&run=12`), or None when it makes no sense."""
        text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
        params = {k: v[0] for k, v in parse_qs(text).items()}
        page = params.pop("page", "")
        if page not in PAGES:
            return None
        run_id = params.pop("run", "")
        query = params.get("filters", "")
        if refusals.query_problem(QueryDict(query)):
            return None  # what the page itself would refuse (issue 19 §2)
        if page == "run":
            valid = refusals.whole_number(run_id, refusals.MAX_ROW_ID)
            return cls(page, run_id=int(run_id), query=query) if valid else None
        if page == "waits":
            return cls(page, mine=params.get("mine") == "1", query=query)
        if page in ("runs", "false", "overview", "map"):
            return cls(page, query=query)
        return cls(page)

    def ws_url(self) -> str:
        params: dict[str, str] = {"page": self.page}
        if self.run_id is not None:
            params["run"] = str(self.run_id)
        if self.mine:
            params["mine"] = "1"
        if self.query:
            params["filters"] = self.query  # the page's own query, page number included
        return f"/ws/health/?{urlencode(params)}"

    def is_affected_by(self, event: Mapping) -> bool:
        if self.page == "run":
            return event.get("run") == self.run_id
        if self.page in ("waits", "false"):
            return event.get("type") == "handoff.changed"
        return True


# --- context builders: one per page, a fixed number of queries each -------------


def overview_context(user: User, window: str = "", team: str = "") -> dict:
    window = window if window in labels.WINDOWS else labels.DEFAULT_WINDOW
    seen = teams.scope_for(user, team)  # issue 22 §2: the user's teams' runs (refuses a team not theirs)
    now = timezone.now()
    since = now - timedelta(seconds=labels.WINDOWS[window][1])
    health_counts, status_counts = dashboard.run_status_counts(since, seen=seen)
    stats = dashboard.window_stats(since, now, seen=seen)
    return {
        "team_switch": team_switch(user, seen, {"window": window} if window != labels.DEFAULT_WINDOW else {}),
        "team": seen.team,
        "window": window,
        "windows": [(key, label) for key, (label, _) in labels.WINDOWS.items()],
        "health_counts": health_counts,
        "status_counts": status_counts,
        "stats": stats,
        # The window's handoffs, like the "Over time" card (a long window's come with its stats, from the rollup).
        "counts": dashboard.overview_counts(since, counted=stats.by_verdict, seen=seen),
        "window_label": labels.WINDOWS[window][0],
        "newest": dashboard.newest_handoffs(seen=seen),
        "soonest": with_offers(dashboard.open_waits(limit=dashboard.SOONEST_LIMIT, seen=seen), user),
        "open_wait_count": dashboard.open_wait_count(seen=seen),
        "false_completions": dashboard.false_completions(limit=dashboard.SOONEST_LIMIT, seen=seen),
        "false_count": dashboard.false_completion_count(seen=seen),
        "now": timezone.now(),
    }


def team_switch(user: User, seen: teams.Scope, keep: Mapping[str, str]) -> dict | None:
    """The team switcher (issue 22 §2): a link to all of the user's teams and one to each, keeping the page's
    other parameters `keep`; None for a user in one team (or none), who sees no switcher."""
    choices = teams.switchable(user)
    if len(choices) < 2:
        return None
    links = [("", "All teams", urlencode(keep))]
    links += [(slug, name, urlencode({**keep, "team": slug})) for slug, name in choices]
    return {"links": links, "chosen": seen.team}


def runs_context(params: QueryDict | Mapping[str, str], user: User) -> dict:
    seen = teams.scope_for(user, _flat(params).get("team", ""))
    graphs, route_versions = dashboard.search_choices(seen=seen)
    form = RunFilterForm(params, graphs=graphs, route_versions=route_versions)
    filters = form.filters()
    # The no-handoff warning is a subquery per listed row only: the LIMIT comes first (the keyset index).
    found = dashboard.runs(filters, seen=seen).annotate(no_handoff=_has_report(NO_HANDOFF))
    page = list_page(found, "created_at", RUNS_PER_PAGE, form.cleaned_data)
    query = _filter_query(params)
    return {"form": form, "page_obj": page, "query": urlencode(query), "filtered": bool(query)}


def list_page(queryset, field: str, size: int, position: Mapping) -> dashboard.KeysetPage:
    """A page of a newest-first list: by cursor (`older`/`newer`), or by a page number up to
    MAX_NUMBERED_PAGE (an OFFSET that deep stays cheap; the view redirects deeper numbers)."""
    number = position.get("page")
    if number and number > 1 and not (position.get("older") or position.get("newer")):
        start = (number - 1) * size
        rows = list(queryset.order_by(f"-{field}", "-pk")[start : start + size + 1])
        shown = rows[:size]
        older = shown[-1].pk if len(rows) > size else None
        return dashboard.KeysetPage(
            shown, dashboard.bounded_count(queryset), older=older, newer=shown[0].pk if shown else None
        )
    return dashboard.keyset_page(
        queryset, field=field, size=size, older=position.get("older"), newer=position.get("newer")
    )


def too_deep_query(params: QueryDict | Mapping[str, str]) -> str | None:
    """Where a page number past MAX_NUMBERED_PAGE goes ("?filters&page=40"): the deepest numbered page,
    from which "Older" walks on by cursor (an OFFSET that deep would read every row before it)."""
    number = _flat(params).get("page", "")
    if not number.isdigit() or int(number) <= MAX_NUMBERED_PAGE:
        return None
    return "?" + urlencode({**_filter_query(params), "page": MAX_NUMBERED_PAGE})


def _filter_query(params: QueryDict | Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in _flat(params).items() if k not in POSITION_PARAMS and v}


def run_context(run: Run, user: User, page: object = 1) -> dict:
    handoff_count = dashboard.run_handoff_count(run)
    # Page 1 holds the latest handoffs; no query of its own (the count is the page's anyway).
    timeline_page = Paginator(range(handoff_count), dashboard.TIMELINE_LIMIT).get_page(page)
    timeline = dashboard.run_timeline(run, page=timeline_page.number)
    handoffs = [item.handoff for item in timeline]
    # Settled verdicts: the header shows the run row read with these handoffs, never an older copy.
    run = handoffs[0].run if handoffs else run
    # A verdict in progress is not one yet: nothing is offered or inspected for it.
    final = [h for h in handoffs if not run_health.due_part(h)]
    stoppable = any(h.verdict in actions.STOPPABLE for h in final)
    offers = run_offers(run, user, stoppable=stoppable, verdicts={h.verdict for h in final})
    history = _verdict_history(handoffs)
    settled = actions.settlements(handoffs, history)
    for h in handoffs:
        h.evidence = reconcile_evidence(h) if h in final else None
        h.history = _dated_in_progress(h, history.get(h.pk, []))
        _offer_on_handoff(h, offers, user, settled.get(h.pk))
    with_stories(handoffs)
    missing = dashboard.missing_context_keys(handoffs)
    for h in handoffs:
        h.missing_keys = missing.get(h.pk, [])
    # Identical reports grouped with a count (a zero call limit repeats one report per attempt).
    reports = dashboard.run_report_groups(run, limit=dashboard.REPORT_LIMIT + 1)
    return {
        "run": run,
        "offers": offers,
        "inspect": _inspect(run, handoffs, offers),
        # Recorded once, when the run ends: among the newest reports (no query of its own).
        "no_handoff": any(report.kind == NO_HANDOFF for report in reports),
        "timeline": timeline,
        "stoppable": stoppable,
        "held_decisions": run.decisions.filter(applied_at__isnull=True).count() if not run.auto_continue else 0,
        "handoff_count": handoff_count,
        "timeline_page": timeline_page,
        "reports": reports[: dashboard.REPORT_LIMIT],
        "more_reports": len(reports) > dashboard.REPORT_LIMIT,
        "effective_limits": effective_stack(run),
        "timeline_limit": dashboard.TIMELINE_LIMIT,
        "now": timezone.now(),
    }


def waits_context(user: User, *, mine: bool = False, page: object = 1, team: str = "") -> dict:
    seen = teams.scope_for(user, team)
    username = user.get_username() if mine else None
    page_obj = Paginator(dashboard.open_waits_query(username, seen=seen), WAITS_PER_PAGE)
    page_obj = page_obj.get_page(page)
    waits = list(page_obj.object_list)
    resolved = resolved_waits(username, seen=seen)
    return {
        "team_switch": team_switch(user, seen, {"mine": "1"} if mine else {}),
        "team": seen.team,
        "waits": with_offers(waits, user),
        "page_obj": page_obj,
        "query": urlencode({k: v for k, v in (("mine", "1" if mine else ""), ("team", team)) if v}),
        "resolved": resolved,
        "mine": mine,
        "now": timezone.now(),
    }


# --- a wait's story: when it opened, and once resolved who decided what, when ----------------

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
    _expiring(handoffs)
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


def false_context(user: User, page: object = 1) -> dict:
    # The total is the runs' stored counts (no COUNT over every false completion per request).
    seen = teams.scope_for(user)
    count = dashboard.false_completion_count(seen=seen)
    found = dashboard.false_completions_query(seen=seen)
    page_obj = dashboard.offset_page(found, page, FALSE_PER_PAGE, count=count)
    return {
        "false_completions": with_offers(list(page_obj.object_list), user),
        "false_count": page_obj.paginator.count,
        "page_obj": page_obj,
        "query": "",
    }


def exact_match_url(params: QueryDict | Mapping[str, str], user: User) -> str | None:
    """Where a search for exactly one operation id or handoff id goes: that run (at that handoff), when the
    user sees it (another team's id is no match, like an unknown one)."""
    text = (_flat(params).get("q") or "").strip()
    found = dashboard.exact_match(text, seen=teams.scope_for(user)) if text and len(text) <= 200 else None
    if found is None:
        return None
    run_id, handoff_pk = found
    url = reverse("sidewisp:run-detail", args=[run_id])
    return f"{url}#handoff-{handoff_pk}" if handoff_pk else url


def _inspect(run: Run, handoffs: list[Handoff], offers: Offers) -> list[dict[str, str]]:
    """Where to look before a retry: each failing handoff's deciding boundary, then the run's reports."""
    if not (offers.retry or offers.retry_hint or run.status == Run.Status.PARKED):
        return []
    unproblematic = ("HEALTHY", "WAITING_ON_APPROVAL")
    failing = [h for h in handoffs if h.boundary and h.verdict not in unproblematic and not run_health.due_part(h)]
    places = [
        {
            "anchor": f"handoff-{h.pk}-{h.boundary}",
            "label": f"{labels.BOUNDARIES.get(h.boundary, h.boundary)} boundary of {h.handoff_id}",
        }
        for h in failing
    ]
    return [*places, {"anchor": f"run-{run.pk}-reports", "label": "what other middleware reported"}]


def _dated_in_progress(h: Handoff, changes: list[VerdictChange]) -> list[VerdictChange]:
    """`changes`, each with `due`: the part the verdict was waiting for then, "" where it was final.

    The latest change is what the card shows now (receipts.ingest.health.due_part); an earlier one was in progress
    when its verdict lacked a due part that arrived later, before the handoff settled.
    """
    for change in changes:
        part = run_health.DUE_PARTS.get(change.verdict)
        arrived = h.first_arrived.get(part) if part else None
        unsettled = h.settled_at is None or change.at < h.settled_at
        change.due = part if part and (arrived is None or change.at < arrived) and unsettled else ""
    if changes:
        changes[-1].due = run_health.due_part(h) or ""
    return changes


def _verdict_history(handoffs: list[Handoff]) -> dict[int, list[VerdictChange]]:
    """Each handoff's verdict changes, oldest first (one query)."""
    history: dict[int, list[VerdictChange]] = {}
    for change in VerdictChange.objects.filter(handoff__in=handoffs).order_by("at", "pk"):
        history.setdefault(change.handoff_id, []).append(change)
    return history


# --- what each run offers: decided here, once, for every page ----------------------

NO_HANDOFF = MiddlewareReport.Kind.NO_HANDOFF


@dataclass(frozen=True)
class Offers:
    """Which actions the pages offer one user for one run, and in words why the others are not offered.

    A page never offers a link the action could only refuse or deny: the user's role (receipts.actions.may,
    which audits nothing), the runtime (what can reach the run's graph) and the run's state decide. A note
    says why an action is not offered only to a user whose role would allow it.
    """

    resumer: str  # who resumes the run after a decision, as a sentence
    observed: bool
    decide: bool  # a decision can reach the graph (the owner rule is per wait: handoff_links)
    reverify: bool  # reopen a false completion
    reverify_note: str
    controllable: bool  # auto-continue can be stopped and lifted (state rules aside)
    stop: bool
    resume: bool
    retry: bool  # retry from the checkpoint (parked, or the destination did not start)
    drive_note: str
    retry_note: str = ""  # why a retry cannot work (the confirmation page says it)
    retry_hint: str = ""  # the same, on the run page: only where a retry is the move and the user may do it
    finished: bool = False
    may: frozenset[str] = frozenset()  # the policy names this user's role permits here (owner rule aside)

    def allows(self, what: str) -> bool:
        """Whether the action `what` (a confirmation page's name) can work on this run at all."""
        if what in actions.DECISION_KINDS:
            return self.decide
        if what == "reopen":
            return self.reverify
        if what in ("stop", "resume"):
            return self.controllable and not self.finished
        if what == "retry":
            return not self.retry_note
        return True

    def why_not(self, what: str) -> str:
        if what in actions.DECISION_KINDS:
            return f"A decision cannot reach this run's graph. {self.resumer}"
        if what == "retry":
            return self.retry_note
        if what in ("stop", "resume") and self.finished:
            return "This run has ended: there is nothing to stop or continue."
        return self.reverify_note if what == "reopen" else self.drive_note


def run_offers(run: Run, user: User, *, stoppable: bool = False, verdicts: set[str] | None = None) -> Offers:
    """What `user` is offered on `run`; `verdicts` are its handoffs' verdicts when the caller has them."""
    runtime = current_runtime()
    # An imported run is neither: no process drives it.
    observed = run.mode == Run.Mode.OBSERVED and run.source == Run.Source.AGENT
    drivable = runtime.can_drive(run)
    finished = run.status in actions.FINISHED
    may = frozenset(policy.name for policy in actions.POLICIES if not policy.owner_rule and actions.may(user, policy))
    controls = actions.STOP_RUN.name in may  # stop, resume and retry: the run-control permission
    # Stopping works in both modes: a worker (hosted) and the app's observe (observed) both check
    # auto-continue before every step and park the run. Resuming differs: for a hosted run a worker
    # drives it on; for an observed run it only lifts the stop (observe parks at once while it is
    # off), so it is still offered, worded as such, and the app continues when it calls observe again.
    if finished:
        drive_note = ""  # an ended run: nothing to stop or drive, and nothing to explain
    elif observed:
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
    controllable = (drivable or observed) and not finished
    retry_candidate = _retry_candidate(run, verdicts)
    retry_note = actions.retry_refusal(run) if retry_candidate else _NOT_RETRIED
    return Offers(
        resumer=runtime.resumer(run),
        observed=observed,
        decide=runtime.can_resume(run),
        reverify=reverify,
        reverify_note=reverify_note if actions.REOPEN_TASK.name in may else "",
        controllable=controllable,
        stop=controls and run.auto_continue and stoppable and controllable,
        resume=controls and not run.auto_continue and controllable,
        retry=controls and not retry_note,
        drive_note=drive_note if controls else "",
        retry_note=retry_note,
        retry_hint=retry_note if controls and retry_candidate else "",
        finished=finished,
        may=may,
    )


_NOT_RETRIED = "Only a parked run, or one whose destination did not start, is retried from its checkpoint."


def _retry_candidate(run: Run, verdicts: set[str] | None) -> bool:
    # Where retrying is the move: a parked run, or one whose destination did not start (any state: the
    # hint then says why it cannot work, e.g. the run has ended). Elsewhere nothing is offered or said.
    if run.status == Run.Status.PARKED:
        return True
    if verdicts is None:
        return run.handoffs.filter(verdict="DESTINATION_NOT_STARTED").exists()
    return "DESTINATION_NOT_STARTED" in verdicts


def with_offers(handoffs: list[Handoff], user: User) -> list[Handoff]:
    """`handoffs` (their runs loaded), each with its run's offers and its own links (asked once per run)."""
    by_run: dict[int, Offers] = {}
    settled = actions.settlements([h for h in handoffs if h.verdict == "FALSE_COMPLETE"])
    decided = decisions_on_open_waits(handoffs)
    for handoff in handoffs:
        if handoff.run_id not in by_run:
            by_run[handoff.run_id] = run_offers(handoff.run, user, verdicts=set())
        handoff.decided = decided.get(handoff.pk)
        _offer_on_handoff(handoff, by_run[handoff.run_id], user, settled.get(handoff.pk))
    return handoffs


@dataclass(frozen=True)
class Link:
    what: str  # the confirmation page's name
    label: str
    url: str


# --- issue 19 §1: a decided wait is shown as such until its run has the decision ------------------


@dataclass(frozen=True)
class Decided:
    """A decision on a wait that its run does not have yet, as the pages say it."""

    by: str
    kind: str
    at: object
    words: str  # "Decided by ops-lead, waiting for a worker"


def decisions_on_open_waits(handoffs: list[Handoff]) -> dict[int, Decided]:
    """The decisions answering these handoffs' open waits (by their current token), by handoff pk: one query."""
    tokens = {h.pk: (h.wait_part or {}).get("resume_token_id") for h in handoffs if h.wait_open}
    tokens = {pk: token for pk, token in tokens.items() if token}
    if not tokens:
        return {}
    found: dict[int, Decided] = {}
    decisions = Decision.objects.select_related("decided_by", "run").filter(handoff_id__in=tokens)
    for decision in decisions.order_by("decided_at", "pk"):
        if decision.resume_token_id == tokens[decision.handoff_id]:
            found.setdefault(decision.handoff_id, decided(decision))
    return found


def decided(decision: Decision, *, expired: bool = False) -> Decided:
    """How a decision its run does not have yet reads: who decided, and what it waits for."""
    by = decision.decided_by.get_username() if decision.decided_by else "the system"
    if decision.applied_at is not None or decision.applications:
        waiting = "being applied by a worker"
    elif not decision.run.auto_continue:
        waiting = "held until auto-continue is resumed"
    elif decision.run.mode == Run.Mode.OBSERVED:
        waiting = "waiting for the app to claim it"
    else:
        waiting = "waiting for a worker"
    words = f"Expiring, {waiting}" if expired else f"Decided by {by}, {waiting}"
    return Decided(by=by, kind=decision.kind, at=decision.decided_at, words=words)


def _expiring(handoffs: list[Handoff]) -> None:
    """Set `expiring` on closed waits the deadline sweep decided whose decision no worker has taken yet."""
    expired = {h.pk: h for h in handoffs if not h.wait_open and (h.wait_part or {}).get("resolution") == "expired"}
    for h in handoffs:
        h.expiring = None
    if not expired:
        return
    waiting = Decision.objects.select_related("run").filter(
        handoff_id__in=expired, decided_by__isnull=True, applied_at__isnull=True, applications=0
    )
    for decision in waiting:
        expired[decision.handoff_id].expiring = decided(decision, expired=True)


# --- end issue 19 §1


@dataclass(frozen=True)
class Note:
    what: str
    text: str


def _offer_on_handoff(h: Handoff, offers: Offers, user: User, settlement: actions.Settlement | None) -> None:
    """Set `h.offers`, `h.links` (what this user may do to it now), `h.notes` and `h.settlement`."""
    h.offers, h.settlement = offers, settlement
    if "decided" not in h.__dict__:  # with_offers asks for a whole list at once
        h.decided = decisions_on_open_waits([h]).get(h.pk)
    h.links, h.notes = handoff_links(h, offers, user, settled=settlement is not None)


def handoff_links(h: Handoff, offers: Offers, user: User, *, settled: bool = False) -> tuple[list[Link], list[Note]]:
    """The action links one handoff offers `user`, and notes for what their role allows but cannot work."""
    links: list[Link] = []
    notes: list[Note] = []

    def link(what: str, label: str) -> None:
        links.append(Link(what, label, reverse("sidewisp:confirm", args=[what, h.pk])))

    reassigns = actions.REASSIGN_WAIT.name in offers.may
    if h.wait_open and getattr(h, "decided", None) is not None:
        pass  # decided: nothing is decided, reassigned or cancelled again (its run is getting the decision)
    elif h.wait_open and h.verdict == "WAITING_ON_APPROVAL":
        if actions.may(user, actions.DECIDE_WAIT, h):
            if offers.decide:
                link("approve", "Approve…")
                link("reject", "Reject…")
                link("edit", "Edit…")
            else:
                notes.append(
                    Note(
                        "decide", "Approve, reject and edit are not offered: a decision cannot reach this run's graph."
                    )
                )
        if reassigns:
            link("reassign", "Reassign…")
    elif h.wait_open:
        if reassigns:
            link("reassign", "Assign owner and deadline…")
            link("cancel", "Cancel the wait…")
    elif h.verdict == "FALSE_COMPLETE" and not settled:
        if actions.REOPEN_TASK.name in offers.may:
            if offers.reverify:
                link("reopen", "Reopen the task…")
            else:
                notes.append(Note("reopen", offers.reverify_note))
        if actions.ACCEPT_TASK.name in offers.may:
            link("accept", "Accept as is…")
            link("resolve", "Mark resolved…")
    return links, notes


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
    from receipts.workers.runtime import current

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
    "accept": "sidewisp:task-accept",
    "resolve": "sidewisp:task-resolve",
    "stop": "sidewisp:run-stop",
    "resume": "sidewisp:run-resume",
    "retry": "sidewisp:run-retry",
}
SETTLING = ("reopen", "accept", "resolve")


def confirm_context(what: str, found: actions.Result, form) -> dict:
    handoff, run = found.handoff, found.run
    target = handoff if handoff is not None else run
    offers = run_offers(run, found.actor)
    decided = _decision_on(handoff) if what in (*actions.DECISION_KINDS, "reassign", "cancel") else None
    settled = actions.settlement(handoff) if what in SETTLING else None
    pending = pending_call(run) if what in actions.DECISION_KINDS and decided is None else None
    if what == "reassign":
        candidates = actions.wait_owner_candidates(handoff, by=found.actor)
        form.offer_owners(candidate.get_username() for candidate in candidates)
    not_now = _not_now(what, handoff, decided, settled)
    return {
        "what": what,
        "title": labels.CONFIRM_TITLES.get(what, what.capitalize()),
        "offers": offers,
        "decided": decided,
        "deciding": what in actions.DECISION_KINDS and decided is None,  # its form above its details (issue 21 §4)
        # issue 19 §1: a decision on a wait still open is on its way to the run: say what it waits for.
        "decided_words": decided_words(handoff, decided),
        "settled": settled,
        "offered": offers.allows(what) and not not_now,
        "not_offered": not_now or offers.why_not(what),
        "action_url": reverse(ACTION_URLS[what], args=[target.pk]),
        "handoff": handoff,
        "run": run,
        "form": form,
        "pending": pending,
        # The call's values (redacted, read from the checkpoint now) only for someone who may decide it.
        "values_shown": pending is not None
        and pending.arg_values is not None
        and actions.may(found.actor, actions.DECIDE_WAIT, handoff),
        "story": with_stories([handoff])[0].story if handoff is not None and handoff.wait_part else None,
        "edit_allowed": pending is not None and "edit" in pending.allowed_decisions,
        "evidence": reconcile_evidence(handoff) if handoff is not None else None,
        "now": timezone.now(),
    }


def _decision_on(handoff: Handoff) -> Decision | None:
    """The decision that answered this wait (by its token), or, once the wait is closed, its latest one."""
    decisions = Decision.objects.select_related("decided_by").filter(handoff=handoff).order_by("-decided_at", "-pk")
    token = (handoff.wait_part or {}).get("resume_token_id")
    if handoff.wait_open:
        return decisions.filter(resume_token_id=token).first() if token else None
    return decisions.first()


def decided_words(handoff: Handoff | None, decision: Decision | None) -> str:
    """ "Decided by X, waiting for a worker" while the run does not have `decision` yet; "" otherwise."""
    if handoff is None or decision is None or not handoff.wait_open:
        return ""
    return decided(decision).words


def _not_now(what: str, handoff: Handoff | None, decided: Decision | None, settled) -> str:
    """Why the handoff's state no longer permits `what` (the page then shows that, and no form)."""
    if what in actions.DECISION_KINDS:
        if decided is not None:
            return "This wait is already decided; nothing is left to decide."
        return "" if handoff.wait_open else "This wait is no longer open; nothing is left to decide."
    if what in ("reassign", "cancel") and not handoff.wait_open:
        return "This wait is no longer open."
    if what in ("reassign", "cancel") and decided is not None:
        return "This wait is already decided; it is not reassigned or cancelled any more."
    if what in SETTLING:
        if settled is not None:
            return "This false completion is already settled."
        if handoff.verdict != "FALSE_COMPLETE":
            verdict = labels.VERDICTS.get(handoff.verdict, labels.UNKNOWN)[1].lower()
            return f"This handoff is {verdict}, not a false completion."
    return ""


def result_context(result: actions.Result, user) -> dict:
    context: dict = {"result": result, "now": timezone.now()}
    if result.run is not None and result.ok and user.has_perm(VIEWER_PERMISSION):
        # The run, live: the operator watches the resume, re-verification or parking happen. Read again: the
        # action's copy predates what its commit set off (a resume can record receipts meanwhile).
        context.update(run_context(Run.objects.get(pk=result.run.pk), user))
        context["ws_url"] = PageScope("run", run_id=result.run.pk).ws_url()
    return context


class AuditQuery:
    def __init__(self, params: QueryDict | Mapping[str, str], user: User) -> None:
        from sidewisp.forms import AuditFilterForm

        names = sorted(set(AuditEntry.objects.order_by().values_list("action", flat=True).distinct()))
        self.form = AuditFilterForm(params, actions=names)
        entries = AuditEntry.objects.filter(**self.form.filters())
        self.entries = audit_seen(entries, user).order_by("-at", "-pk")


def audit_seen(entries, user: User):
    """The audit entries `user` may read: those about their teams' runs, and those about no run (settings,
    tokens, refused ids: no team's evidence); an admin reads every entry."""
    seen = teams.scope_for(user)
    if seen.everything:
        return entries
    return entries.filter((Q(run__isnull=False) & seen.q("run__")) | Q(run__isnull=True))


class ListPositionForm(forms.Form):
    """Where in a newest-first list a page is: a page number (shallow) or a cursor either way."""

    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_NUMBERED_PAGE)
    older = forms.IntegerField(required=False, min_value=1)
    newer = forms.IntegerField(required=False, min_value=1)

    def position(self) -> dict:
        self.is_valid()
        return {k: v for k, v in getattr(self, "cleaned_data", {}).items() if v is not None}


def audit_context(params: QueryDict | Mapping[str, str], user: User) -> dict:
    query = AuditQuery(params, user)
    position = ListPositionForm(params).position()
    page = list_page(query.entries.select_related("run"), "at", AUDIT_PER_PAGE, position)
    return {"form": query.form, "page_obj": page, "query": urlencode(_filter_query(params))}


def _flat(params: QueryDict | Mapping[str, str]) -> dict[str, str]:
    return params.dict() if isinstance(params, QueryDict) else dict(params)


# --- the live pages' renderer: sidewisp.live.render (it builds on the contexts above) ---------------

LIVE_NAMES = frozenset({"LivePage", "audience", "change_marker", "render_live", "render_oob", "team_refused"})


def __getattr__(name: str):
    # Imported on first use, not here: sidewisp.live.render imports this module.
    if name in LIVE_NAMES:
        from sidewisp.live import render as liverender

        return getattr(liverender, name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
