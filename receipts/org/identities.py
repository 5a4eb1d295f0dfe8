"""Who an account is at the identity provider: what marks a user as signed in with single sign-on."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class SsoIdentity(models.Model):
    """The identity provider's (issuer, subject) behind one Sidewisp user.

    A user with an identity is managed by the identity provider: its role groups follow the groups
    claim at every sign-in and it has no usable password. A user without one is a local account,
    which single sign-on never signs in and whose roles it never touches.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, related_name="sso_identity", on_delete=models.CASCADE)
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255, help_text="The identity provider's `sub` claim: stable, never reused.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        app_label = "receipts"
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_once")]

    def __str__(self) -> str:
        return f"{self.user} ({self.issuer})"
