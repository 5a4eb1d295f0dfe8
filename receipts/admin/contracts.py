"""Contracts in the admin: versions added after a review and never edited, with the wait reason codes as rows.

A contract version is never edited (spec §2): "Add" starts from a copy of the
latest version (or the one `?from=<pk>` names), validates it with the bundle's
contracts parser, and shows a review (routes that change, a diff) that must be
confirmed before the new version is saved. Adding needs `receipts.change_limits`
besides the model permission; the admin role holds both.

Wait reasons are rows of the same form but not part of the version: spec §2 declares them once for the whole
contracts document, and check 6 accepts a wait's reason whatever its route version. So they stay their own rows
(`WaitReason`), shown on every new version's form and exported with it; saving a version adds the new ones
(`receipts.add_waitreason`), and a stored one is never renamed or removed here.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from django.urls import path
from django.utils.html import format_html

from receipts.admin import contractform
from receipts.admin.base import CHANGE_LIMITS, ImmutableAdmin, PrettyJSONField, ReviewedAddAdmin, iso_time
from receipts.ingest import contracts
from receipts.models import AuditEntry, ContractVersion, WaitReason
from receipts.org import audit
from receipts.verdicts import bundle


class ContractVersionForm(contractform.ImportsDocument, forms.ModelForm):
    based_on = forms.ModelChoiceField(
        queryset=ContractVersion.objects.order_by("-created_at", "-pk"),
        required=False,
        empty_label="(nothing: start empty)",
        help_text="The version the review compares with: choosing one reloads the routes and steps below from it.",
        # static/js/admin_based_on.js reloads the form with ?from=<id> (get_changeform_initial_data prefills).
        widget=forms.Select(attrs={"data-reload-param": "from"}),
    )
    # issue 30 §5: routes and steps as rows (receipts.admin.contractform), the JSON in `document`.
    routes = PrettyJSONField(
        widget=contractform.RouteRows(),
        help_text="Which agent may hand work to which, and the context keys the receiver needs.",
    )
    steps = PrettyJSONField(
        required=False,
        widget=contractform.StepRows(),
        help_text=(
            "Optional (spec §2): the state key naming an agent's current step, the step before it is set, "
            "and the tools each step's model call is given."
        ),
    )
    # issue 30 §5: the contracts' wait reasons as rows. They belong to the whole contracts document, not to this
    # version (spec §2, check 6): the rows show the stored list, and saving the version adds the new ones.
    wait_reasons = forms.JSONField(
        required=False,
        label="Wait reasons",
        widget=contractform.WaitReasonRows(),
        help_text=(
            "The reason codes a wait may name, for every version (a wait with another reason is uncertain), "
            "and what each means."
        ),
    )
    document = contractform.document_field()

    class Meta:
        model = ContractVersion
        fields = ["based_on", "version", "routes", "steps", "note"]

    class Media:
        js = ["js/admin_based_on.js"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.stored_reasons = list(WaitReason.objects.order_by("code").values_list("code", flat=True))
        self.fields["wait_reasons"].widget.kept = frozenset(self.stored_reasons)
        self.new_reasons: list[tuple[str, str]] = []

    def clean_wait_reasons(self):
        rows, row_errors, problems = contractform.checked_wait_reasons(
            self.cleaned_data.get("wait_reasons"), self.stored_reasons
        )
        self.fields["wait_reasons"].widget.row_errors = row_errors  # each on its row, and the first in the summary
        if row_errors or problems:
            raise ValidationError([*row_errors.values(), *problems])
        stored = set(self.stored_reasons)
        self.new_reasons = [(code, description) for code, description in rows if code not in stored]
        return [[code, description] for code, description in rows]

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

    def get_urls(self):  # issue 30 §5: a version as its JSON document, for export
        export = self.admin_site.admin_view(self.export_view)
        return [path("<int:pk>/export.json", export, name="receipts_contractversion_export"), *super().get_urls()]

    def export_view(self, request, pk: int):
        version = get_object_or_404(ContractVersion, pk=pk)
        if not self.has_view_permission(request, version):
            raise PermissionDenied
        reasons = list(WaitReason.objects.order_by("code").values_list("code", flat=True))
        return contractform.export_response(request, version, reasons)

    # --- the add form and its review

    def add_view(self, request, form_url="", extra_context=None):
        if not self.has_add_permission(request):
            _deny(request, "contracts.add")
        return super().add_view(request, form_url, extra_context)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["based_on", "version", "routes", "steps", "wait_reasons", "note", "document"]
        return self.shown

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.shown

    def get_changeform_initial_data(self, request):
        chosen = request.GET.get("from", "")
        reasons = {"wait_reasons": [[r.code, r.description] for r in WaitReason.objects.order_by("code")]}
        if chosen == "none":  # "Based on: nothing" was chosen
            return {"routes": {}, **reasons}
        base = ContractVersion.objects.filter(pk=chosen).first() if chosen.isdigit() else None
        base = base or contracts.latest_version()
        if base is None:
            return {"routes": {}, **reasons}
        return {
            "based_on": base.pk,
            "routes": base.routes,
            "steps": base.steps,
            "version": contracts.suggest_version_name(base.version),
            **reasons,
        }

    def review_new(self, request: HttpRequest, form: forms.ModelForm) -> dict:
        # Before the review and before the save (outside the save's transaction, so the refusal stays audited).
        if form.new_reasons and not request.user.has_perm("receipts.add_waitreason"):
            _deny(request, "contracts.add", "receipts.add_waitreason")
        base, version, routes = (form.cleaned_data[k] for k in ("based_on", "version", "routes"))
        before = base.routes if base else None
        changes = contracts.route_changes(before, routes)
        warnings = [] if changes else [f"{version} declares the same routes as {base or 'nothing'}."]
        steps, steps_before = form.cleaned_data.get("steps"), base.steps if base else None
        if steps != steps_before:
            warnings.append(f"{version} changes the steps.")
        if form.new_reasons:
            codes = ", ".join(code for code, _ in form.new_reasons)
            warnings.append(f"Saving {version} adds the wait reasons {codes} (for every version).")
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
        # New reasons are added with their meaning; a stored one stays as it is (added once, never edited).
        for code, description in form.new_reasons:
            WaitReason.objects.get_or_create(code=code, defaults={"description": description})
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
                "wait_reasons_added": [code for code, _ in form.new_reasons][:50],
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


@admin.register(WaitReason)
class WaitReasonAdmin(ImmutableAdmin):
    """The contracts' wait reasons, to read: they are added on the contract version form (issue 30 §5), with the
    routes and steps they go with, and never renamed or removed (waits and approval rules name them)."""

    list_display = ["code", "description"]
    actions = None

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) or request.user.has_perm(CHANGE_LIMITS)

    def has_add_permission(self, request):
        return False  # on the contract version form: one place to declare what the contracts allow

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def _deny(request: HttpRequest, action: str, permission: str = CHANGE_LIMITS) -> None:
    audit.log(
        actor=request.user,
        action=action,
        object_type="contracts",
        object_id="new",
        outcome=AuditEntry.Outcome.DENIED,
        reason=f"missing permission {permission}",
    )
    raise PermissionDenied
