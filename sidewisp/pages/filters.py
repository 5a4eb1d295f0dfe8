"""The runs list's filters: the form, its time windows and its health levels in words."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta
from functools import lru_cache

from django import forms
from django.http import QueryDict
from django.template.loader import render_to_string
from django.utils import timezone

from receipts.ingest import health as run_health
from receipts.ingest import silence
from receipts.models import Run
from receipts.queries import dashboard
from sidewisp.pages import labels
from sidewisp.pages.paging import MAX_NUMBERED_PAGE

# The time windows the runs list offers: runs created within the last ...
WINDOWS: dict[str, tuple[str, timedelta]] = {
    "15m": ("15 minutes", timedelta(minutes=15)),
    "1h": ("1 hour", timedelta(hours=1)),
    "24h": ("24 hours", timedelta(hours=24)),
    "7d": ("7 days", timedelta(days=7)),
}
# A silent observed run is still RUNNING in the database; the pages count and filter it apart (issue 29 §5).
STATUS_LABELS = {**dict(Run.Status.choices), silence.SILENT: "Silent (no receipt for a while)"}
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
    status = forms.ChoiceField(required=False, choices=[("", "Any status")], label="Task status")
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
        # The overview's "In progress" tile: handoffs whose failing verdict is not final yet (spec v1.2 Settled).
        self.fields["verdict"].choices.append((dashboard.IN_PROGRESS, labels.HEALTH["in_progress"][1]))
        self.fields["status"].choices += [(status, STATUS_LABELS[status]) for status in dashboard.TASK_STATUSES]
        self.fields["health"].choices += [(level, HEALTH_LABELS.get(level, level)) for level in run_health.LEVELS]
        self.fields["graph"].choices += [(name, name) for name in graphs]
        self.fields["route_version"].choices += [(version, version) for version in route_versions]
        for name in ("since", "until"):
            self.fields[name].widget.input_type = "datetime-local"

    def fields_html(self) -> str:
        """The visible fields' markup (labels, inputs, help, errors), rendered once per distinct input and choices.

        Django renders a form through a template per widget, option and attribute list: 3.3 ms of CPU for this
        form, a sixth of the runs list's (issue 32 §4). The markup is a function of the visible fields' data and of
        the graph and route-version choices only, so the same filters are rendered once per process."""
        get = self.data.getlist if isinstance(self.data, QueryDict) else lambda name: [self.data[name]]
        shown = tuple((f.name, tuple(get(f.name))) for f in self.visible_fields() if f.name in self.data)
        return _fields_html(shown, _choices(self, "graph"), _choices(self, "route_version"))

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


def _choices(form: RunFilterForm, name: str) -> tuple[str, ...]:
    return tuple(value for value, _ in form.fields[name].choices[1:])


@lru_cache(maxsize=256)
def _fields_html(shown: tuple[tuple[str, tuple[str, ...]], ...], graphs: tuple, route_versions: tuple) -> str:
    data = QueryDict(mutable=True)
    for name, values in shown:
        data.setlist(name, list(values))
    form = RunFilterForm(data, graphs=graphs, route_versions=route_versions)
    return render_to_string("sidewisp/_run_filter_fields.html", {"form": form})
