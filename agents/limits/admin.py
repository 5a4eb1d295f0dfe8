"""The limits in the admin ("Agents"): versions, their diffs, a preview of the next run's stack, rollback.

Versions are never edited: "Add" saves a new version (pre-filled with the
current one), "Roll back" saves an old version's document as a new version.
Changing limits needs `receipts.change_limits`, checked here on the server;
every change and every denied attempt lands in the audit log.
"""

from __future__ import annotations

import json

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html_join
from django.views.decorators.http import require_GET, require_http_methods

from agents.limits import form as limitsform
from agents.limits import wording
from agents.limits.checks import team_checks
from agents.limits.described import agent_tools, variants
from agents.limits.document import LimitsError, diff
from agents.limits.resolution import preview
from agents.limits.setting import schema
from agents.limits.stoppers import stopping_warnings
from agents.limits.validation import validate_document
from agents.models import LimitsVersion
from receipts.admin import PrettyJSONField, ReviewedAddAdmin, iso_time
from receipts.models import AuditEntry
from receipts.org import audit

CHANGE_LIMITS = "receipts.change_limits"


class LimitsVersionForm(forms.ModelForm):
    document = PrettyJSONField(
        widget=forms.Textarea(attrs={"rows": 40, "cols": 110, "spellcheck": "false"}),
        help_text=(
            "The whole document (for export and import): the default settings of every agent, and per-agent "
            "overrides. Saving creates a new version. The settings form edits one agent's settings field by field."
        ),
    )

    class Meta:
        model = LimitsVersion
        fields = ["document", "note"]

    def clean_document(self):
        try:
            return validate_document(self.cleaned_data["document"], team_checks())
        except LimitsError as exc:
            raise ValidationError(exc.errors) from None


@admin.register(LimitsVersion)
class LimitsVersionAdmin(ReviewedAddAdmin):
    form = LimitsVersionForm
    list_display = ["__str__", "note", "created_by", iso_time("created_at", "created"), "is_current"]
    list_select_related = ["created_by"]
    readonly_fields = ["number", "note", "created_by", "created_at", "rolled_back_from", "changes", "full_document"]

    # --- permissions -----------------------------------------------------------

    def has_module_permission(self, request):
        # The permission lives on receipts (with the contracts); show the Agents section to its holders.
        return self.has_view_permission(request)

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm(CHANGE_LIMITS) or super().has_view_permission(request, obj)

    def has_add_permission(self, request):
        return request.user.has_perm(CHANGE_LIMITS)

    def has_change_permission(self, request, obj=None):
        return False  # a version never changes; adding one is the change

    def has_delete_permission(self, request, obj=None):
        return False

    # --- views -----------------------------------------------------------------

    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("preview/", wrap(require_GET(self.preview_view)), name="agents_limitsversion_preview"),
            path(
                "settings/",
                wrap(require_http_methods(["GET", "POST"])(self.settings_view)),
                name="agents_limitsversion_settings",
            ),
            path("<int:pk>/diff/", wrap(require_GET(self.diff_view)), name="agents_limitsversion_diff"),
            path(
                "<int:pk>/rollback/",
                wrap(require_http_methods(["GET", "POST"])(self.rollback_view)),
                name="agents_limitsversion_rollback",
            ),
            *super().get_urls(),
        ]

    def add_view(self, request, form_url="", extra_context=None):
        _require_change(request, "limits.change", "new")
        return super().add_view(request, form_url, extra_context)

    def review_new(self, request: HttpRequest, form: forms.ModelForm) -> dict | None:
        """Valid settings that stop runs (a limit of 0, ...) are saved only after a confirmation."""
        document = form.cleaned_data["document"]
        warnings = stopping_warnings(document, team_checks())
        if not warnings:
            return None
        return {
            "title": "These limits stop runs: save anyway?",
            "intro": "The settings are valid, but runs under them cannot do their work. The next run uses them.",
            "warnings": warnings,
            "diff_rows": _worded_diff(LimitsVersion.current().document, document),
            "submit": "Save anyway",
        }

    def get_changeform_initial_data(self, request):
        return {"document": LimitsVersion.current().document}

    def get_fields(self, request, obj=None):
        return ["document", "note"] if obj is None else self.readonly_fields

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def save_model(self, request, obj, form, change):
        previous = LimitsVersion.current()
        saved = LimitsVersion.save_new(obj.document, user=request.user, note=obj.note)
        obj.pk, obj.number, obj.created_at, obj.created_by = saved.pk, saved.number, saved.created_at, saved.created_by
        _log_change(request, "limits.change", saved, previous)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        extra_context = extra_context or {}
        if object_id is not None:
            extra_context["may_change"] = request.user.has_perm(CHANGE_LIMITS)
            extra_context["current"] = LimitsVersion.current()
        return super().changeform_view(request, object_id, form_url, extra_context)

    def diff_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        version = get_object_or_404(LimitsVersion, pk=pk)
        previous = version.previous()
        rows = _worded_diff(previous.document if previous else None, version.document)
        context = {**self._context(request, f"Changes in {version}"), "version": version, "previous": previous}
        return TemplateResponse(request, "admin/agents/limitsversion/diff.html", {**context, "rows": rows})

    def rollback_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        _require_change(request, "limits.rollback", pk)
        version = get_object_or_404(LimitsVersion, pk=pk)
        current = LimitsVersion.current()
        if version.pk == current.pk:
            messages.info(request, f"{version} is the current version: there is nothing to roll back to.")
            return HttpResponseRedirect(reverse("admin:agents_limitsversion_change", args=[version.pk]))
        if request.method == "POST":
            note = f"rollback to {version}"
            saved = LimitsVersion.save_new(
                version.document, user=request.user, note=note, rolled_back_from=version.number
            )
            _log_change(request, "limits.rollback", saved, current)
            messages.success(request, f"{saved} restores the settings of {version}; the next run uses it.")
            return HttpResponseRedirect(reverse("admin:agents_limitsversion_change", args=[saved.pk]))
        rows = _worded_diff(current.document, version.document)
        context = {**self._context(request, f"Roll back to {version}"), "version": version, "current": current}
        return TemplateResponse(request, "admin/agents/limitsversion/rollback.html", {**context, "rows": rows})

    def settings_view(self, request: HttpRequest) -> HttpResponse:
        """The current settings of one scope as a form; a valid change shows its diff before it is saved.

        Saving posts the whole new document to the add view (the JSON view), which checks it
        again, asks to confirm settings that stop runs, creates the version and audits it.
        """
        _require_change(request, "limits.change", "new")
        checks = team_checks()
        known = limitsform.scopes(checks)
        scope = request.GET.get("scope", "") if request.GET.get("scope", "") in known else known[0]
        current = LimitsVersion.current()
        data = request.POST if request.method == "POST" else None
        form = limitsform.LimitsSettingsForm(data, document=current.document, scope=scope, checks=checks)
        context = {**self._context(request, f"Limits of {scope}"), "form": form, "scope": scope, "scopes": known}
        if form.is_bound and form.is_valid() and form.new_document is not None:
            review = {
                "rows": _worded_diff(current.document, form.new_document),
                "warnings": stopping_warnings(form.new_document, checks),
                "document_json": json.dumps(form.new_document, ensure_ascii=False),
                "note": form.cleaned_data["note"] or f"{scope} changed in the form",
                "current": current,
            }
            return TemplateResponse(request, "admin/agents/limitsversion/settings_review.html", {**context, **review})
        status = 400 if form.is_bound else 200
        return TemplateResponse(request, "admin/agents/limitsversion/settings_form.html", context, status=status)

    def preview_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        agents = list(agent_tools())
        if not agents:
            raise Http404("no registered graph describes its agents")
        agent = request.GET.get("agent") if request.GET.get("agent") in agents else agents[0]
        scenarios = variants()
        scenario = scenarios.get(request.GET.get("scenario", ""))
        version = LimitsVersion.current()
        context = {
            **self._context(request, f"Next run's middleware for {agent}"),
            "version": version,
            "agent": agent,
            "agents": agents,
            "scenario": scenario,
            "scenarios": sorted(scenarios),
            "stack": preview(version.document, agent, scenario),
        }
        return TemplateResponse(request, "admin/agents/limitsversion/preview.html", context)

    # --- display ---------------------------------------------------------------

    @admin.display(boolean=True, description="current")
    def is_current(self, obj: LimitsVersion) -> bool:
        return obj.pk == LimitsVersion.current().pk

    @admin.display(description="changes from the previous version")
    def changes(self, obj: LimitsVersion) -> str:
        previous = obj.previous()
        rows = _worded_diff(previous.document if previous else None, obj.document)
        shown = [(row["place"], row["setting"], row["before"], row["after"]) for row in rows]
        return format_html_join("\n", "<div>{} (<code>{}</code>): {} → {}</div>", shown) or "—"

    @admin.display(description="document")
    def full_document(self, obj: LimitsVersion) -> str:
        return format_html_join("", "<pre>{}</pre>", [(json.dumps(obj.document, indent=2, ensure_ascii=False),)])

    def _context(self, request: HttpRequest, title: str) -> dict:
        return {**self.admin_site.each_context(request), "opts": self.model._meta, "title": title}


def _require_change(request: HttpRequest, action: str, object_id: object) -> None:
    if request.user.has_perm(CHANGE_LIMITS):
        return
    audit.log(
        actor=request.user,
        action=action,
        object_type="limits",
        object_id=str(object_id),
        outcome=AuditEntry.Outcome.DENIED,
        reason=f"missing permission {CHANGE_LIMITS}",
    )
    raise PermissionDenied


def _log_change(request: HttpRequest, action: str, saved: LimitsVersion, previous: LimitsVersion) -> None:
    rows = diff(previous.document, saved.document)
    audit.log(
        actor=request.user,
        action=action,
        object_type="limits",
        object_id=saved.number,
        outcome=AuditEntry.Outcome.DONE,
        reason=saved.note,
        detail={"version": saved.number, "previous": previous.number, "changed": [r["setting"] for r in rows][:50]},
    )


def _worded_diff(old: dict | None, new: dict) -> list[dict[str, str]]:
    """`diff`'s rows, each with its setting's place in words (`wording.place`) beside the document's path."""
    settings = schema()
    return [{**row, "place": wording.place(row["setting"], settings)} for row in diff(old, new)]
