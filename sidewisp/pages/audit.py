"""The audit log page: its filters, the entries a user may read, a page of them."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from django import forms
from django.db.models import Q
from django.http import QueryDict

from receipts.actions import User
from receipts.models import AuditEntry
from receipts.org import teams
from receipts.queries import dashboard
from sidewisp.pages import labels
from sidewisp.pages.paging import ListPositionForm, filter_query, list_page

AUDIT_PER_PAGE = 50


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False, max_length=150)
    action = forms.ChoiceField(required=False)
    verdict = forms.ChoiceField(required=False)
    outcome = forms.ChoiceField(required=False, choices=[("", "Any outcome"), *AuditEntry.Outcome.choices])
    since = forms.DateTimeField(required=False, label="From (UTC)")
    until = forms.DateTimeField(required=False, label="Before (UTC)")
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(self, *args, actions: list[str] | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["action"].choices = [("", "Any action"), *((a, a) for a in actions or [])]
        self.fields["verdict"].choices = [("", "Any verdict"), *((v, label[1]) for v, label in labels.VERDICTS.items())]
        for name in ("since", "until"):
            self.fields[name].widget.input_type = "datetime-local"

    def filters(self) -> dict:
        """The valid filters as ORM lookups; an invalid field is ignored (and shown as an error)."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        lookups = {
            "actor": "actor_name__iexact",
            "action": "action",
            "verdict": "verdict",
            "outcome": "outcome",
            "since": "at__gte",
            "until": "at__lt",
        }
        return {lookup: data[name] for name, lookup in lookups.items() if data.get(name) not in (None, "")}


class AuditQuery:
    def __init__(self, params: QueryDict | Mapping[str, str], user: User) -> None:
        names = dashboard.distinct_values(AuditEntry, "action")
        self.form = AuditFilterForm(params, actions=names)
        entries = AuditEntry.objects.filter(**self.form.filters())
        self.entries = audit_seen(entries, user).order_by("-at", "-pk")


def audit_seen(entries, user: User):
    """The audit entries `user` may read: those about their teams' runs (also once retention pruned the run:
    the entry keeps its owner, issue 29 §1), and those about no run (settings, tokens, refused ids: no team's
    evidence); an admin reads every entry. The team's names are read once (one query), so the filter compares
    runs with a few names rather than evaluating the scope's subqueries on every run it joins."""
    seen = teams.scope_for(user).resolved()
    if seen.everything:
        return entries
    about_run = Q(run__isnull=False) & seen.q("run__")
    about_pruned_run = Q(run__isnull=True, run_pruned=True) & seen.q("pruned_run_")
    return entries.filter(about_run | about_pruned_run | Q(run__isnull=True, run_pruned=False))


def audit_context(params: QueryDict | Mapping[str, str], user: User) -> dict:
    query = AuditQuery(params, user)
    position = ListPositionForm(params).position()
    page = list_page(query.entries.select_related("run"), "at", AUDIT_PER_PAGE, position)
    return {"form": query.form, "page_obj": page, "query": urlencode(filter_query(params))}
