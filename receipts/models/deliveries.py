"""Where messages go and what was delivered: notification channels, alert rules, deliveries, worker task deliveries."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from receipts.models.evidence import Run
from receipts.models.operations import AuditEntry
from receipts.notify import destinations
from receipts.verdicts.bundle import VERDICTS

# --- Notifications and alerts (issue 14 §1: receipts.notify.notifications, receipts.notify.alerts) ---------------


class NotificationChannel(models.Model):
    """Where messages go: an e-mail address, a JSON webhook signed with HMAC-SHA256, or a Slack incoming webhook.

    A channel belongs to a user or to a group: a wait's owner hears through their own channels and those of
    their groups. A channel of nobody is used only by the alert rules that name it.
    """

    class Kind(models.TextChoices):
        EMAIL = "email", "E-mail"
        WEBHOOK = "webhook", "JSON webhook (HMAC-signed)"
        SLACK = "slack", "Slack incoming webhook"

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notification_channels",
        help_text="Notify this user of the waits they own.",
    )
    group = models.ForeignKey(
        "auth.Group",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notification_channels",
        help_text="Or: notify every member of this group of the waits they own.",
    )
    email = models.EmailField(blank=True, help_text="E-mail only. Blank: the address of the person notified.")
    # A Slack webhook URL is itself a credential: never shown in lists, deliveries or logs.
    url = models.URLField(max_length=500, blank=True, help_text="Webhook and Slack: where to POST (http or https).")
    secret = models.CharField(
        max_length=200, blank=True, help_text="Webhook only: the key the receiver checks the signature with."
    )
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(user__isnull=True) | models.Q(group__isnull=True), name="channel_of_user_or_group"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    # issue 19: a webhook URL is http(s) without credentials, whatever saves it (receipts.notify.destinations).
    def save(self, *args, **kwargs) -> None:
        self._check_url()
        super().save(*args, **kwargs)

    def clean(self) -> None:
        super().clean()
        self._check_url()

    def _check_url(self) -> None:
        if self.url and (problem := destinations.url_problem(self.url)):
            raise ValidationError({"url": f"The URL {problem}."})


class AlertRule(models.Model):
    """A condition on the evidence that is announced on a channel when it starts and when it ends.

    The state fields belong to receipts.notify.alerts: whether the condition holds, whether the channel was told,
    when the last firing was sent (the cooldown counts from it) and how many were (idempotency keys).
    """

    class Kind(models.TextChoices):
        VERDICT = "verdict", "Verdict X on agent Y"
        WINDOW = "window", "More than N non-healthy handoffs in M minutes"
        OVERDUE = "overdue", "A wait overdue"
        HEARTBEAT = "heartbeat", "Worker heartbeat lost"
        # issue 19 §1: promised work (starts, resumes, re-verifications) no worker applied in time.
        UNAPPLIED = "unapplied", "Work no worker applied in time"
        # issue 29 item 5: observed runs whose app sent no receipt for SIDEWISP_SILENT_AFTER.
        SILENT = "silent", "Observed runs gone silent"

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    verdict = models.CharField(
        max_length=40, blank=True, choices=[(v, v) for v in VERDICTS], help_text="Verdict rules: the verdict."
    )
    # issue 30 §5: a window rule counts only the verdicts chosen here (the default "settled failing" rule: the
    # failing ones, so an uncertain wait does not fire it); none chosen counts every non-healthy verdict.
    verdicts = models.JSONField(
        default=list,
        blank=True,
        help_text="Window rules: count only handoffs settled in these verdicts; none chosen: every non-healthy one.",
    )
    agent = models.CharField(max_length=200, blank=True, help_text="Sender or receiver of the handoff; blank: any.")
    threshold = models.PositiveIntegerField(
        default=0,
        help_text="Fires when more than this many handoffs (or overdue waits) match; "
        "heartbeat rules: when fewer than this many workers answer (at least one).",
    )
    window_minutes = models.PositiveIntegerField(
        default=10, help_text="Verdict and window rules: count handoffs whose verdict changed this recently."
    )
    channel = models.ForeignKey(NotificationChannel, on_delete=models.PROTECT, related_name="alert_rules")
    cooldown_minutes = models.PositiveIntegerField(
        default=15, help_text="At most one firing sent per this many minutes (a resolve is always sent)."
    )
    muted_until = models.DateTimeField(null=True, blank=True, help_text="Send nothing before this time.")
    active = models.BooleanField(default=True)
    # issue 22 §2: a team's rule counts only that team's runs; blank counts every team's (an admin's rule).
    team = models.ForeignKey(
        "Team",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="alert_rules",
        help_text="Count only this team's runs; blank: every team's.",
    )

    firing = models.BooleanField(default=False, editable=False)
    announced = models.BooleanField(default=False, editable=False)
    fired_at = models.DateTimeField(null=True, blank=True, editable=False)
    notices = models.PositiveIntegerField(default=0, editable=False)
    changed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Delivery(models.Model):
    """One message to one channel, promised through the outbox with the change it tells of, then sent.

    `key` makes it exactly once per event and channel. `last_error` is an error class or an HTTP status,
    never a URL, a secret or a response body.
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        SENT = "sent"
        FAILED = "failed"

    channel = models.ForeignKey(NotificationChannel, null=True, on_delete=models.SET_NULL, related_name="deliveries")
    event = models.CharField(max_length=40)
    # The username a wait notification is for (an e-mail channel without an address writes to them).
    recipient = models.CharField(max_length=150, blank=True)
    key = models.CharField(max_length=200, unique=True)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED, db_index=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.event} ({self.status})"


# --- issue 21 §1: worker deliveries, for the run's history (workers.deliveries, queries.history) ---


class TaskDelivery(models.Model):
    """One delivery of a run's task to a worker that took its lease: which task, which worker, which attempt.

    Written when the worker starts driving the run, and given its outcome (a run status, or a verification's
    pass/fail) when it ends; a delivery that never ends was cut short (its worker died, or an error retried
    it). Ids, names and codes only.
    """

    run = models.ForeignKey(Run, related_name="task_deliveries", on_delete=models.PROTECT)
    task = models.CharField(max_length=16)  # an OutboxIntent kind: start, resume or reverify
    task_id = models.CharField(max_length=200, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    # The how-many-th delivery of this task id (a Celery retry and a broker's redelivery keep the id).
    attempt = models.PositiveIntegerField(default=1)
    # The broker handed the same message again (the same task id and retry number was delivered before).
    redelivered = models.BooleanField(default=False)
    # The operator action whose outbox intent this task carries out, when one did.
    promised_by = models.ForeignKey(
        AuditEntry, null=True, blank=True, related_name="deliveries", on_delete=models.PROTECT
    )
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=40, blank=True)
    # The run's latest verdict when the delivery ended.
    verdict = models.CharField(max_length=40, blank=True)

    class Meta:
        indexes = [models.Index(fields=["run", "started_at"], name="delivery_run_started")]

    def __str__(self) -> str:
        return f"{self.task} {self.task_id} #{self.attempt}"


# --- end issue 21 §1
