"""The receipts admin: contracts as immutable versions, wait reasons, and read-only evidence.

A contract version is never edited (spec §2): "Add" starts from a copy of the
latest version (or the one `?from=<pk>` names), validates it with the bundle's
contracts parser, and shows a review (routes that change, a diff) that must be
confirmed before the new version is saved. Adding needs `receipts.change_limits`
besides the model permission; the admin role holds both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.utils.html import format_html

from receipts.ingest import contracts, storable
from receipts.models import (
    AlertRule,  # issue 14 §1
    AuditEntry,
    ContractVersion,
    Delivery,  # issue 14 §1
    Handoff,
    Membership,  # issue 22 §2
    MiddlewareReport,
    NotificationChannel,  # issue 14 §1
    Receipt,
    Run,
    SourceToken,  # issue 14 §4
    Team,  # issue 22 §2
    TeamGraph,  # issue 22 §2
    TeamSource,  # issue 22 §2
    WaitReason,
)
from receipts.org import audit
from receipts.verdicts import bundle
from receipts.workers import sources

CHANGE_LIMITS = "receipts.change_limits"
CONFIRM_FIELD = "_confirm"
# Immutable things have nothing to continue editing, and another blank "add" is not a next step.
NO_SAVE_VARIANTS = {"show_save_and_add_another": False, "show_save_and_continue": False}


def iso_time(field: str, description: str | None = None) -> Callable[[Any], str]:
    """A list column showing `field` in ISO 8601 (the admin only; the operator pages keep their format)."""

    @admin.display(description=description or field.replace("_", " "), ordering=field)
    def show(obj: Any) -> str:
        value = getattr(obj, field)
        return timezone.localtime(value).isoformat(timespec="seconds") if value else "—"

    show.__name__ = f"{field}_iso"
    return show


class PrettyJSONField(forms.JSONField):
    """A JSON textarea that shows its value indented; a value the database cannot store is an error here."""

    def prepare_value(self, value):
        if isinstance(value, str) and not isinstance(value, forms.fields.InvalidJSONInput):
            try:
                value = json.loads(value)
            except (ValueError, RecursionError):  # not JSON, or nested or long past what Python reads
                return value
        if isinstance(value, forms.fields.InvalidJSONInput):
            return value
        # Escaped where UTF-8 cannot carry it (a lone surrogate): the page is still sent, with the field's error.
        ascii_only = storable.json_problem(value) is not None
        return json.dumps(value, indent=2, ensure_ascii=ascii_only, allow_nan=True)

    def to_python(self, value):
        try:
            return super().to_python(value)
        except RecursionError:
            raise ValidationError("The JSON is nested too deeply to read.", code="invalid") from None
        except ValueError as exc:  # an integer too long to convert (Django words a JSONDecodeError itself)
            raise ValidationError(f"The JSON is not valid: {exc}.", code="invalid") from None

    def bound_data(self, data, initial):
        try:
            return super().bound_data(data, initial)
        except (ValueError, RecursionError):
            return forms.fields.InvalidJSONInput(data)

    def validate(self, value) -> None:
        super().validate(value)
        if (problem := storable.json_problem(value)) is not None:
            raise ValidationError(problem.sentence("The JSON") + ", which cannot be stored.")


class ImmutableAdmin(admin.ModelAdmin):
    """Objects saved once: no "Save and add another", no "Save and continue editing"."""

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        return super().changeform_view(request, object_id, form_url, {**NO_SAVE_VARIANTS, **(extra_context or {})})


class ReviewedAddAdmin(ImmutableAdmin):
    """The add view shows a review first when `review_new` returns one; saving needs its confirmation.

    The confirmation is a digest of the submitted data and of the review itself:
    a change to either after the review asks for a new review.
    """

    def review_new(self, request: HttpRequest, form: forms.ModelForm) -> dict | None:
        raise NotImplementedError

    def add_view(self, request, form_url="", extra_context=None):
        if request.method == "POST" and self.has_add_permission(request):
            form = self.get_form(request, None, change=False)(request.POST, request.FILES)
            if form.is_valid() and (review := self.review_new(request, form)) is not None:
                digest = _digest(request, review)
                if request.POST.get(CONFIRM_FIELD) != digest:
                    return self._render_review(request, review, digest)
        return super().add_view(request, form_url, extra_context)

    def _render_review(self, request: HttpRequest, review: dict, digest: str) -> HttpResponse:
        hidden = [(k, v) for k, values in request.POST.lists() if k not in _NOT_CARRIED for v in values]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            **review,
            "hidden": hidden,
            "confirm_field": CONFIRM_FIELD,
            "digest": digest,
        }
        return TemplateResponse(request, "admin/review_version.html", context)


_NOT_CARRIED = frozenset({"csrfmiddlewaretoken", CONFIRM_FIELD})


def _digest(request: HttpRequest, review: dict) -> str:
    posted = sorted((k, v) for k, values in request.POST.lists() if k not in _NOT_CARRIED for v in values)
    payload = json.dumps([posted, review], sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()


# --- contracts ------------------------------------------------------------------


class ContractVersionForm(forms.ModelForm):
    based_on = forms.ModelChoiceField(
        queryset=ContractVersion.objects.order_by("-created_at", "-pk"),
        required=False,
        empty_label="(nothing: start empty)",
        help_text="The version the review compares with: choosing one reloads the routes and steps below from it.",
        # static/js/admin_based_on.js reloads the form with ?from=<id> (get_changeform_initial_data prefills).
        widget=forms.Select(attrs={"data-reload-param": "from"}),
    )
    routes = PrettyJSONField(
        widget=forms.Textarea(attrs={"rows": 24, "cols": 90, "spellcheck": "false"}),
        help_text='{"sender": {"receiver": ["required", "context", "keys"]}}',
    )
    steps = PrettyJSONField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 8, "cols": 90, "spellcheck": "false"}),
        help_text='Optional (spec §2 v1.2): {"key": "current_step", "tools": {"step": ["tool", "names"]}}',
    )

    class Meta:
        model = ContractVersion
        fields = ["based_on", "version", "routes", "steps", "note"]

    class Media:
        js = ["js/admin_based_on.js"]

    def clean_version(self):
        version = self.cleaned_data["version"]
        try:
            bundle.parse_contracts({"wait_reasons": [], "routes": {version: {}}})
        except bundle.BundleError as exc:
            raise ValidationError(f"version: {exc.message}") from None
        return version

    def clean_routes(self):
        routes = self.cleaned_data["routes"]
        try:
            bundle.parse_contracts({"wait_reasons": [], "routes": {"version": routes}})
        except bundle.BundleError as exc:
            raise ValidationError(str(exc).replace("routes.version", "routes", 1)) from None
        return routes

    def clean(self):
        data = super().clean()
        version, routes, steps = data.get("version"), data.get("routes"), data.get("steps")
        if steps is not None and version and routes is not None:
            document = {"wait_reasons": [], "routes": {version: routes}, "steps": {version: steps}}
            try:
                bundle.parse_contracts(document)
            except bundle.BundleError as exc:
                self.add_error("steps", str(exc).replace(f"steps.{version}", "steps", 1))
        return data


@admin.register(ContractVersion)
class ContractVersionAdmin(ReviewedAddAdmin):
    form = ContractVersionForm
    list_display = ["version", "note", "created_by", iso_time("created_at", "created"), "in_use"]
    list_select_related = ["created_by"]
    ordering = ["-created_at", "-pk"]
    actions = None
    shown = ["version", "note", "created_by", "created_at", "in_use", "routes_document", "steps_document"]

    # --- permissions: add (admins), view; never change; delete only what no handoff references

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) or request.user.has_perm(CHANGE_LIMITS)

    def has_add_permission(self, request):
        return super().has_add_permission(request) and request.user.has_perm(CHANGE_LIMITS)

    def has_change_permission(self, request, obj=None):
        return False  # versions are kept, never edited in place: adding one is the change

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (obj is None or not obj.is_referenced())

    # --- the add form and its review

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            _deny(request, "contracts.add")
        return super().add_view(request, form_url, extra_context)

    def get_fields(self, request, obj=None):
        return ["based_on", "version", "routes", "steps", "note"] if obj is None else self.shown

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.shown

    def get_changeform_initial_data(self, request):
        chosen = request.GET.get("from", "")
        if chosen == "none":  # "Based on: nothing" was chosen
            return {"routes": {}}
        base = ContractVersion.objects.filter(pk=chosen).first() if chosen.isdigit() else None
        base = base or contracts.latest_version()
        if base is None:
            return {"routes": {}}
        return {
            "based_on": base.pk,
            "routes": base.routes,
            "steps": base.steps,
            "version": contracts.suggest_version_name(base.version),
        }

    def review_new(self, request: HttpRequest, form: forms.ModelForm) -> dict:
        base, version, routes = (form.cleaned_data[k] for k in ("based_on", "version", "routes"))
        before = base.routes if base else None
        changes = contracts.route_changes(before, routes)
        warnings = [] if changes else [f"{version} declares the same routes as {base or 'nothing'}."]
        steps, steps_before = form.cleaned_data.get("steps"), base.steps if base else None
        if steps != steps_before:
            warnings.append(f"{version} changes the steps.")
        diff = contracts.diff_lines(before, routes, names=(str(base or "—"), version))
        if steps != steps_before:
            diff += contracts.diff_lines(steps_before, steps, names=(f"{base or '—'} steps", f"{version} steps"))
        return {
            "title": f"Review the new contract version {version}",
            "intro": f"{version} starts from {base or 'nothing'}. Senders follow it once their route_version names it.",
            "warnings": warnings,
            "route_changes": changes,
            "diff_lines": diff,
            "submit": f"Save {version}",
        }

    def save_model(self, request, obj, form, change):
        obj.created_by = request.user
        super().save_model(request, obj, form, change)
        base = form.cleaned_data.get("based_on")
        changes = contracts.route_changes(base.routes if base else None, obj.routes)
        audit.log(
            actor=request.user,
            action="contracts.add",
            object_type="contracts",
            object_id=obj.version,
            outcome=AuditEntry.Outcome.DONE,
            reason=obj.note,
            detail={
                "based_on": str(base or ""),
                "changed": [f"{c.sender}→{c.receiver}: {c.change}" for c in changes][:50],
                "steps_changed": obj.steps != (base.steps if base else None),
            },
        )

    # --- display

    @admin.display(boolean=True, description="referenced by handoffs")
    def in_use(self, obj: ContractVersion) -> bool:
        return obj.is_referenced()

    @admin.display(description="routes")
    def routes_document(self, obj: ContractVersion) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.routes, indent=2, ensure_ascii=False))

    @admin.display(description="steps")
    def steps_document(self, obj: ContractVersion) -> str:
        if obj.steps is None:
            return "—"
        return format_html("<pre>{}</pre>", json.dumps(obj.steps, indent=2, ensure_ascii=False))


class WaitReasonForm(forms.ModelForm):
    class Meta:
        model = WaitReason
        fields = ["code", "description"]

    def clean_code(self):
        code = self.cleaned_data["code"]
        try:
            bundle.parse_contracts({"wait_reasons": [code], "routes": {}})
        except bundle.BundleError as exc:
            raise ValidationError(f"code: {exc.message}") from None
        return code


@admin.register(WaitReason)
class WaitReasonAdmin(ImmutableAdmin):
    """Waits and approval rules name these codes: added, never renamed or removed here."""

    form = WaitReasonForm
    list_display = ["code", "description"]
    actions = None

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) or request.user.has_perm(CHANGE_LIMITS)

    def has_add_permission(self, request):
        return super().has_add_permission(request) and request.user.has_perm(CHANGE_LIMITS)

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def _deny(request: HttpRequest, action: str) -> None:
    audit.log(
        actor=request.user,
        action=action,
        object_type="contracts",
        object_id="new",
        outcome=AuditEntry.Outcome.DENIED,
        reason=f"missing permission {CHANGE_LIMITS}",
    )
    raise PermissionDenied


# --- evidence -------------------------------------------------------------------


class ReadOnlyAdmin(ImmutableAdmin):
    """Evidence is recorded by the agents, never edited by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["operation_id", "scenario", "status", "dry_run", iso_time("created_at", "created")]
    list_filter = ["status", "dry_run", "source"]
    search_fields = ["operation_id"]


@admin.register(Handoff)
class HandoffAdmin(ReadOnlyAdmin):
    list_display = [
        "handoff_id",
        "sender",
        "receiver",
        "route_version",
        "verdict",
        "final_status",
        iso_time("updated_at", "updated"),
    ]
    list_filter = ["verdict", "final_status"]
    search_fields = ["handoff_id", "run__operation_id"]
    list_select_related = ["run"]


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyAdmin):
    list_display = ["handoff", "part", "attempt", iso_time("recorded_at", "recorded")]
    list_filter = ["part"]
    list_select_related = ["handoff"]


@admin.register(MiddlewareReport)
class MiddlewareReportAdmin(ReadOnlyAdmin):
    list_display = ["run", "agent", "kind", iso_time("recorded_at", "recorded")]
    list_filter = ["kind"]
    list_select_related = ["run"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The audit log is append-only: no add, change or delete here either (receipts.org.audit writes it)."""

    list_display = [iso_time("at"), "actor_name", "action", "object_type", "object_id", "verdict", "outcome"]
    list_filter = ["outcome", "action"]
    search_fields = ["actor_name", "action", "object_id"]
    date_hierarchy = "at"
    actions = None  # not even the bulk "delete selected"


# --- issue 14 §4: per-source API tokens ------------------------------------------------


class SourceTokenForm(forms.ModelForm):
    class Meta:
        model = SourceToken
        fields = ["source_name", "note"]

    def clean_source_name(self):
        try:
            return bundle.parse_name(self.cleaned_data["source_name"], "source_name")
        except bundle.BundleError as exc:
            raise ValidationError(f"source name: {exc.message}") from None


@admin.register(SourceToken)
class SourceTokenAdmin(ImmutableAdmin):
    """Tokens of agents that run elsewhere: made here (shown once, stored as a digest), revoked, never edited."""

    form = SourceTokenForm
    list_display = [
        "source_name",
        "key_id",
        "note",
        iso_time("created_at", "created"),
        iso_time("last_used_at", "last used"),
        iso_time("revoked_at", "revoked"),
    ]
    list_filter = ["source_name", ("revoked_at", admin.EmptyFieldListFilter)]
    readonly_fields = ["source_name", "note", "key_id", "created_at", "created_by", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def get_readonly_fields(self, request, obj=None):
        return self.readonly_fields if obj is not None else []

    def has_delete_permission(self, request, obj=None):
        return False  # revoked, never deleted: the audit log and the runs keep naming it

    def save_model(self, request, obj, form, change):
        if change:
            return  # nothing is editable
        _, request.sidewisp_new_token = sources.issue(obj.source_name, note=obj.note, by=request.user, token=obj)

    def response_add(self, request, obj, post_url_continue=None):
        context = {**self.admin_site.each_context(request), "opts": self.opts, "token": obj}
        response = TemplateResponse(
            request,
            "admin/receipts/sourcetoken/created.html",
            {**context, "raw_token": request.sidewisp_new_token, "title": "Token created"},
        )
        add_never_cache_headers(response)
        return response

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        revoked = sum(sources.revoke(token, by=request.user) for token in queryset)
        self.message_user(request, f"{revoked} token(s) revoked; their sources can no longer post.")


# --- end issue 14 §4


# --- Notifications and alerts (issue 14 §1) ---------------------------------------------------------
# Editing needs the model permissions (the admin role holds them, migration 0013): default deny.


class NotificationChannelForm(forms.ModelForm):
    """Each kind asks for its own fields; the secret is write-only (blank keeps the stored one)."""

    url = forms.URLField(
        required=False, max_length=500, assume_scheme="https", help_text="Webhook and Slack: where to POST."
    )
    secret = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Webhook only: the HMAC-SHA256 key. Blank keeps the stored secret.",
    )

    class Meta:
        model = NotificationChannel
        fields = ["name", "kind", "user", "group", "email", "url", "secret", "active"]

    def clean_name(self) -> str:
        return _checked_text(self.cleaned_data["name"])

    def clean_secret(self) -> str:
        return self.cleaned_data["secret"] or (self.instance.secret if self.instance.pk else "")

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if data.get("user") and data.get("group"):
            self.add_error("group", "A channel belongs to a user or to a group, not both.")
        if kind in (NotificationChannel.Kind.WEBHOOK, NotificationChannel.Kind.SLACK) and not data.get("url"):
            self.add_error("url", "A webhook needs the URL to post to.")
        if kind == NotificationChannel.Kind.WEBHOOK and not data.get("secret"):
            self.add_error("secret", "A webhook needs a secret: receivers check the signature with it.")
        if kind == NotificationChannel.Kind.EMAIL and data.get("url"):
            self.add_error("url", "An e-mail channel has no URL.")
        return data


@admin.register(NotificationChannel)
class NotificationChannelAdmin(admin.ModelAdmin):
    form = NotificationChannelForm
    # Never the URL or the secret in a list: a Slack URL is a credential.
    list_display = ["name", "kind", "user", "group", "active"]
    list_filter = ["kind", "active"]
    search_fields = ["name", "user__username", "group__name"]
    list_select_related = ["user", "group"]


class AlertRuleForm(forms.ModelForm):
    class Meta:
        model = AlertRule
        fields = [
            "name",
            "kind",
            "verdict",
            "agent",
            "threshold",
            "window_minutes",
            "channel",
            "cooldown_minutes",
            "muted_until",
            "active",
            "team",  # issue 22 §2
        ]

    def clean_name(self) -> str:
        return _checked_text(self.cleaned_data["name"])

    def clean_agent(self) -> str:
        agent = self.cleaned_data["agent"].strip()
        if not agent:
            return ""
        try:
            return bundle.parse_name(agent, "agent")
        except bundle.BundleError as exc:
            raise ValidationError(f"The agent {exc.message}.") from None

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if kind == AlertRule.Kind.VERDICT and not data.get("verdict"):
            self.add_error("verdict", "A verdict rule needs the verdict it watches.")
        if kind in (AlertRule.Kind.VERDICT, AlertRule.Kind.WINDOW) and not data.get("window_minutes"):
            self.add_error("window_minutes", "The window must be at least one minute.")
        return data


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    form = AlertRuleForm
    list_display = [
        "name",
        "kind",
        "verdict",
        "agent",
        "channel",
        "team",
        "active",
        "firing",
        "announced",
        iso_time("muted_until", "muted until"),
    ]
    list_filter = ["kind", "active", "firing", "team"]
    search_fields = ["name", "agent"]
    list_select_related = ["channel", "team"]
    readonly_fields = ["firing", "announced", "fired_at", "notices", "changed_at"]


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """What was sent where, and why not: an error class or an HTTP status, never the URL or a secret."""

    list_display = [
        iso_time("created_at", "created"),
        "event",
        "channel",
        "recipient",
        "status",
        "attempts",
        "last_error",
    ]
    list_filter = ["status", "event"]
    search_fields = ["recipient", "key"]
    list_select_related = ["channel"]
    actions = None


def _checked_text(value: str) -> str:
    if (problem := bundle.text_problem(value)) is not None:
        raise ValidationError(f"This {problem}.")
    return value


# --- end notifications and alerts


# --- issue 22 §2: teams, their members, graphs and sources -----------------------------------------


class _TeamPart(admin.TabularInline):
    """A team's members, graphs or sources: edited by whoever may edit the team (no permissions of their own)."""

    extra = 0

    def has_view_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.has_perm("receipts.view_team")

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.has_perm("receipts.change_team")

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.has_perm("receipts.change_team")

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.has_perm("receipts.change_team")


class MembershipInline(_TeamPart):
    """Members: set here (local), or by the identity provider's claim at each login (its rows follow it)."""

    model = Membership
    fields = ["user", "origin", "created_at"]
    readonly_fields = ["created_at"]
    autocomplete_fields = ["user"]


class TeamGraphInline(_TeamPart):
    model = TeamGraph
    verbose_name = "graph the team owns"


class TeamSourceInline(_TeamPart):
    model = TeamSource
    verbose_name = "remote source the team owns"


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """A team: its members see, search, stream and act on the runs of its graphs and sources only."""

    list_display = ["slug", "name", "owns_unclaimed"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline, TeamGraphInline, TeamSourceInline]

    def save_related(self, request: HttpRequest, form, formsets, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        # What changed, by name (members, graphs, sources): never a value a user typed beyond those.
        changed = sorted({f.model._meta.model_name for f in formsets if f.has_changed()})
        audit.log(
            actor=request.user,
            action="team.change" if change else "team.add",
            object_type="team",
            object_id=form.instance.slug,
            outcome=AuditEntry.Outcome.DONE,
            detail={"changed": changed, "fields": sorted(form.changed_data)},
        )

    def delete_model(self, request: HttpRequest, obj: Team) -> None:
        slug = obj.slug
        super().delete_model(request, obj)
        audit.log(actor=request.user, action="team.delete", object_type="team", object_id=slug, outcome="done")


# --- end issue 22 §2


# issue 22 §3: the retention policy (its own module).
from receipts.retention import admin as retention_admin  # noqa: E402, F401
