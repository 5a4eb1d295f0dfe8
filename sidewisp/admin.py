"""Admin pages of the web layer: which accounts single sign-on manages (issue 22 §1), read-only."""

from __future__ import annotations

from django.contrib import admin

from receipts.admin import ReadOnlyAdmin
from receipts.org.identities import SsoIdentity


@admin.register(SsoIdentity)
class SsoIdentityAdmin(ReadOnlyAdmin):
    """An account listed here follows the identity provider; one not listed is local (README "Single sign-on")."""

    list_display = ["user", "issuer", "created_at"]
    search_fields = ["user__username", "issuer"]
    list_select_related = ["user"]
