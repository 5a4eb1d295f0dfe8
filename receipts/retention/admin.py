"""The retention policy in the admin: one row, changed with `receipts.change_retention`, every change audited.

The list opens the policy itself. Nobody adds or deletes it; a user who may view it but not change it sees
it read-only, and a change posted without `change_retention` is refused and recorded as denied.
"""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone

from receipts.models import RETENTION_DAY_FIELDS, AuditEntry, RetentionPolicy
from receipts.org import audit

CHANGE_RETENTION = "receipts.change_retention"
VIEW_RETENTION = "receipts.view_retentionpolicy"
CHANGED = "retention.changed"


@admin.register(RetentionPolicy)
class RetentionPolicyAdmin(admin.ModelAdmin):
    fields = [*RETENTION_DAY_FIELDS, "changed_at", "changed_by"]
    readonly_fields = ["changed_at", "changed_by"]

    def has_view_permission(self, request, obj=None):
        return request.user.has_perm(VIEW_RETENTION) or request.user.has_perm(CHANGE_RETENTION)

    def has_change_permission(self, request, obj=None):
        return request.user.has_perm(CHANGE_RETENTION)

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def changelist_view(self, request, extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(reverse("admin:receipts_retentionpolicy_change", args=[1]))

    def get_object(self, request, object_id, from_field=None):
        # The defaults until someone saves a change: the row is made by the first save.
        return RetentionPolicy.current() if object_id == "1" else None

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        if request.method == "POST" and not self.has_change_permission(request):
            _log(request, AuditEntry.Outcome.DENIED, {}, reason=f"missing permission {CHANGE_RETENTION}")
        extra = {"show_save_and_add_another": False, "show_save_and_continue": False, **(extra_context or {})}
        return super().changeform_view(request, object_id, form_url, extra)

    def save_model(self, request: HttpRequest, obj: RetentionPolicy, form, change) -> None:
        before = RetentionPolicy.current()
        changed = {
            name: [getattr(before, name), getattr(obj, name)]
            for name in RETENTION_DAY_FIELDS
            if getattr(before, name) != getattr(obj, name)
        }
        obj.changed_at = timezone.now()
        obj.changed_by = request.user
        super().save_model(request, obj, form, change)
        _log(request, AuditEntry.Outcome.DONE if changed else AuditEntry.Outcome.NOOP, changed)


def _log(request: HttpRequest, outcome: str, changed: dict, *, reason: str = "") -> None:
    audit.log(
        actor=request.user,
        action=CHANGED,
        object_type="retention_policy",
        object_id=1,
        outcome=outcome,
        reason=reason,
        detail={"changed": changed},
    )
