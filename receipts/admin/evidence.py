"""The evidence in the admin, read-only: runs, handoffs, receipts, middleware reports and the audit log."""

from __future__ import annotations

from django.contrib import admin

from receipts.admin.base import ReadOnlyAdmin, iso_time
from receipts.models import AuditEntry, Handoff, MiddlewareReport, Receipt, Run


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
