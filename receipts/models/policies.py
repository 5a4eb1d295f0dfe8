"""The retention policy: how many days each kind of record is kept (receipts.retention prunes by it)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

# --- issue 22 §3: retention (receipts.retention prunes by it; the admin edits it) ---------------------


class RetentionPolicy(models.Model):
    """How many days each kind of record is kept: the one row, edited in the admin (`change_retention`).

    Open waits and runs that have not ended are never pruned, nor anything they reference. Evidence that
    belongs to a run is never kept longer than the run; audit entries may outlive the runs they name (they
    keep their ids and text, the link is cleared) but never go sooner than `audit_minimum_days`.
    """

    receipts_days = models.PositiveIntegerField(
        default=90, help_text="Receipts and verdict history of ended runs, counted from the run's end."
    )
    reports_days = models.PositiveIntegerField(
        default=90, help_text="Middleware reports of ended runs, counted from the run's end."
    )
    deliveries_days = models.PositiveIntegerField(
        default=30,
        help_text="Notification deliveries sent or given up, and worker task deliveries of ended runs.",
    )
    runs_days = models.PositiveIntegerField(
        default=180, help_text="Ended runs with their handoffs and everything else recorded about them."
    )
    audit_days = models.PositiveIntegerField(default=400, help_text="Audit entries, counted from when they happened.")
    audit_minimum_days = models.PositiveIntegerField(
        default=365, help_text="Audit entries are never kept for fewer days than this."
    )
    changed_at = models.DateTimeField(default=timezone.now, editable=False)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.SET_NULL, editable=False
    )

    class Meta:
        verbose_name = "retention policy"
        verbose_name_plural = "retention policy"
        default_permissions = ("view",)
        permissions = [("change_retention", "Can change how long records are kept")]
        constraints = [models.CheckConstraint(condition=models.Q(pk=1), name="one_retention_policy")]

    def __str__(self) -> str:
        return "Retention policy"

    @classmethod
    def current(cls) -> RetentionPolicy:
        """The saved policy, or the defaults (unsaved) when nobody has changed them."""
        return cls.objects.filter(pk=1).first() or cls(pk=1)

    def clean(self) -> None:
        super().clean()
        errors: dict[str, str] = {}
        for name in RETENTION_DAY_FIELDS:
            value = getattr(self, name)
            if value is not None and not 1 <= value <= MAX_RETENTION_DAYS:
                errors[name] = f"Between 1 and {MAX_RETENTION_DAYS} days."
        if errors:
            raise ValidationError(errors)
        for name, label in RUN_BOUND_KINDS:
            if getattr(self, name) > self.runs_days:
                errors[name] = f"{label} belong to runs: at most the runs' {self.runs_days} days."
        if self.audit_days < self.audit_minimum_days:
            errors["audit_days"] = f"At least the minimum of {self.audit_minimum_days} days set below."
        if errors:
            raise ValidationError(errors)


RETENTION_DAY_FIELDS = (
    "receipts_days",
    "reports_days",
    "deliveries_days",
    "runs_days",
    "audit_days",
    "audit_minimum_days",
)
MAX_RETENTION_DAYS = 36_500
# Kinds that belong to a run: never kept longer than the run itself.
RUN_BOUND_KINDS = (("receipts_days", "Receipts"), ("reports_days", "Reports"), ("deliveries_days", "Deliveries"))


# --- end issue 22 §3
