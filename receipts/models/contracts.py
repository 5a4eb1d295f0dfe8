"""What an admin configures for the evidence to be judged by: the versioned route/context contracts, wait reasons."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ContractVersion(models.Model):
    """One immutable version of the route and context contracts (spec §2)."""

    version = models.CharField(max_length=200, unique=True)
    routes = models.JSONField(help_text='{"sender": {"receiver": ["required", "context", "keys"]}}')
    # Spec §2 v1.2: a single-agent team's step variable and the tools each step's model call must get.
    steps = models.JSONField(
        null=True, blank=True, help_text='{"key": "current_step", "tools": {"step": ["tool", "names"]}}'
    )
    note = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    class Meta:
        ordering = ["version"]

    def __str__(self) -> str:
        return self.version

    def is_referenced(self) -> bool:
        from receipts.models.evidence import Handoff  # evidence refers to no contract model: no circle

        return Handoff.objects.filter(route_version=self.version).exists()


class WaitReason(models.Model):
    code = models.CharField(max_length=200, unique=True)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return self.code
