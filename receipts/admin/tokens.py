"""Per-source API tokens in the admin (issue 14 §4): made here and shown once, revoked, never edited."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.template.response import TemplateResponse
from django.utils.cache import add_never_cache_headers

from receipts.admin.base import ImmutableAdmin, iso_time
from receipts.models import SourceToken
from receipts.verdicts import bundle
from receipts.workers import sources


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
