"""Teams in the admin (issue 22 §2): their members, graphs and sources, every change audited."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from receipts.models import AuditEntry, Membership, Team, TeamGraph, TeamSource
from receipts.org import audit


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
    verbose_name_plural = "graphs the team owns"  # Django's own plural would read "ownss"


class TeamSourceInline(_TeamPart):
    model = TeamSource
    verbose_name = "remote source the team owns"
    verbose_name_plural = "remote sources the team owns"


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
