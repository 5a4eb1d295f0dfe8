from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from receipts import bundle
from receipts.models import AuditEntry, ContractVersion, Handoff, MiddlewareReport, Receipt, Run, WaitReason


class ContractVersionForm(forms.ModelForm):
    class Meta:
        model = ContractVersion
        fields = ["version", "routes", "note"]

    def clean_routes(self):
        routes = self.cleaned_data["routes"]
        try:
            bundle.parse_contracts({"wait_reasons": [], "routes": {"version": routes}})
        except bundle.BundleError as exc:
            raise ValidationError(str(exc).replace("routes.version", "routes", 1)) from None
        return routes

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk and self.has_changed() and self.instance.is_referenced():
            msg = (
                f"{self.instance.version} is referenced by handoffs and cannot change. "
                "Give it a new version name and use “Save as new”."
            )
            raise ValidationError(msg)
        return cleaned


@admin.register(ContractVersion)
class ContractVersionAdmin(admin.ModelAdmin):
    form = ContractVersionForm
    save_as = True
    list_display = ["version", "note", "created_at"]

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    def has_delete_permission(self, request, obj=None):
        return obj is None or not obj.is_referenced()


@admin.register(WaitReason)
class WaitReasonAdmin(admin.ModelAdmin):
    list_display = ["code", "description"]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Evidence is recorded by the agents, never edited by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["operation_id", "scenario", "status", "dry_run", "created_at"]
    list_filter = ["status", "dry_run", "source"]
    search_fields = ["operation_id"]


@admin.register(Handoff)
class HandoffAdmin(ReadOnlyAdmin):
    list_display = ["handoff_id", "sender", "receiver", "route_version", "verdict", "final_status", "updated_at"]
    list_filter = ["verdict", "final_status"]
    search_fields = ["handoff_id", "run__operation_id"]
    list_select_related = ["run"]


@admin.register(Receipt)
class ReceiptAdmin(ReadOnlyAdmin):
    list_display = ["handoff", "part", "attempt", "recorded_at"]
    list_filter = ["part"]
    list_select_related = ["handoff"]


@admin.register(MiddlewareReport)
class MiddlewareReportAdmin(ReadOnlyAdmin):
    list_display = ["run", "agent", "kind", "recorded_at"]
    list_filter = ["kind"]
    list_select_related = ["run"]


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The audit log is append-only: no add, change or delete here either (receipts.audit writes it)."""

    list_display = ["at", "actor_name", "action", "object_type", "object_id", "verdict", "outcome"]
    list_filter = ["outcome", "action"]
    search_fields = ["actor_name", "action", "object_id"]
    date_hierarchy = "at"
    actions = None  # not even the bulk "delete selected"
