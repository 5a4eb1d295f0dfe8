"""What people and workers do with runs: decisions on waits, the audit log, the outbox, deployment, source tokens."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone
from sidewisp_agent.kinds import DecisionKind

from receipts.models.appendonly import AppendOnlyModel
from receipts.models.evidence import Handoff, Run


class Decision(models.Model):
    """A person's (or the system's) answer to a wait, bound to its resume token.

    One decision per resume token: the unique constraint makes the token single
    use, so a double click, a second tab or a racing approver changes nothing.
    """

    class Kind(models.TextChoices):
        APPROVE = DecisionKind.APPROVE
        REJECT = DecisionKind.REJECT
        EDIT = DecisionKind.EDIT
        # A false completion reopened (spec §5 v1.3): the destination works again. Not an answer to a wait; its
        # resume token is "reopen-<audit entry>", and the app or a worker claims it like any decision.
        REOPEN = DecisionKind.REOPEN

    run = models.ForeignKey(Run, related_name="decisions", on_delete=models.PROTECT)
    handoff = models.ForeignKey(Handoff, related_name="decisions", on_delete=models.PROTECT)
    resume_token_id = models.CharField(max_length=200)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    message = models.CharField(max_length=500, blank=True)
    # Only for "edit": handed to the graph, never shown on a page or in an event.
    edited_args = models.JSONField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT)
    decided_at = models.DateTimeField(default=timezone.now)
    applied_at = models.DateTimeField(null=True, blank=True)
    # How many times a worker resumed the graph with this decision: exactly once
    # when the lease and the applied check do their job.
    applications = models.PositiveSmallIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "resume_token_id"], name="one_decision_per_resume_token"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.resume_token_id}"

    def as_resume(self) -> dict:
        """The decision as runner.resume_run takes it."""
        if self.kind == self.Kind.EDIT:
            return {"type": "edit", "args": self.edited_args or {}}
        if self.kind == self.Kind.REJECT:
            return {"type": "reject", "message": self.message}
        if self.kind == self.Kind.REOPEN:
            msg = "a reopen is not a wait's decision: it is applied with sidewisp_agent.reopening"
            raise ValueError(msg)
        return {"type": "approve"}


class AuditEntry(AppendOnlyModel):
    """Who did what to which object, when, why and with what outcome. Append-only.

    Denied attempts and system decisions are entries too (actor is None for the system).
    """

    class Outcome(models.TextChoices):
        DONE = "done"
        DENIED = "denied"
        REFUSED = "refused"  # allowed, but the object's state did not permit it
        NOOP = "noop"  # already done: an idempotent repeat

    at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT)
    actor_name = models.CharField(max_length=150, help_text="The username at the time, or “system”.")
    action = models.CharField(max_length=60, db_index=True)
    object_type = models.CharField(max_length=40)
    object_id = models.CharField(max_length=200)
    run = models.ForeignKey(Run, null=True, blank=True, related_name="audit_entries", on_delete=models.PROTECT)
    handoff = models.ForeignKey(Handoff, null=True, blank=True, related_name="audit_entries", on_delete=models.PROTECT)
    verdict = models.CharField(max_length=40, blank=True, help_text="The handoff's verdict when it happened.")
    reason = models.CharField(max_length=500, blank=True)
    outcome = models.CharField(max_length=20, choices=Outcome.choices)
    # Ids and codes only.
    detail = models.JSONField(default=dict, blank=True)
    # Issue 29 §1: when retention prunes the entry's run it clears the link and keeps what decided the run's team
    # (its graph and source name), so the entry stays its team's for as long as it is kept. The team scope reads
    # them as it reads a run's own (`teams.Scope.q("pruned_run_")`); an entry about no run has run_pruned False.
    run_pruned = models.BooleanField(default=False, db_default=False, editable=False)
    pruned_run_graph = models.CharField(max_length=100, blank=True, default="", db_default="", editable=False)
    pruned_run_source_name = models.CharField(max_length=100, blank=True, default="", db_default="", editable=False)

    class Meta:
        ordering = ["-at", "-pk"]
        verbose_name_plural = "audit entries"
        # pages at scale (issue 13): newest first with a tiebreaker (the audit log's keyset pages).
        indexes = [models.Index(fields=["at", "id"], name="audit_newest")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action} {self.outcome}"


class OutboxIntent(models.Model):
    """Work an operator action promised a worker (start, resume, re-verify), written in the action's transaction.

    `receipts.notify.outbox` sends it right after the commit and marks it sent. A send that fails (the broker is
    down) leaves it unsent; the beat sweep sends it again once it is due, until the broker takes it. That is
    at least once: the worker's apply is idempotent (a decision is applied once, a settled run not started
    again).
    """

    class Kind(models.TextChoices):
        START = "start"
        RESUME = "resume"
        REVERIFY = "reverify"
        # A notification or alert message (receipts.notify.notifications): object_id is the Delivery.
        DELIVER = "deliver"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    # The run to start or re-verify, the decision to apply, or the delivery to send.
    object_id = models.BigIntegerField()
    # None for a delivery about no run (an alert on a worker heartbeat).
    run = models.ForeignKey(Run, null=True, blank=True, related_name="intents", on_delete=models.PROTECT)
    # Unique: names the action that promised it (its audit entry), so one action promises one intent.
    key = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    # When the sweep may (re)send it: a little after creation, so it does not race the on-commit send.
    due_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=200, blank=True)
    # --- issue 19 §1: set by the worker that carried the intent out, in its own transaction. Until then
    # the sweep sends it again once `due_at` passes (a sent intent is due again SIDEWISP_INTENT_APPLY_SECONDS
    # after its send): a message another deployment's worker took, or a broker lost, is not the end of it.
    applied_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["due_at"], condition=models.Q(applied_at__isnull=True), name="outbox_unapplied_by_due"
            ),
        ]

    def __str__(self) -> str:
        state = f"sent {self.sent_at:%Y-%m-%d %H:%M:%S}" if self.sent_at else f"unsent after {self.attempts}"
        if self.applied_at:
            state = f"applied {self.applied_at:%Y-%m-%d %H:%M:%S}"
        return f"{self.kind} {self.object_id} ({state})"


# --- issue 19 §1: the deployment a database belongs to (receipts.workers.deployment) ----------------------


class Deployment(models.Model):
    """The one row naming this database's deployment: a random id made by the first migration.

    Every task message carries it (sidewisp.ops.envelope); a worker leaves a message of another deployment
    for that deployment's workers, so deployments sharing a Redis and a queue never act on each other's
    rows. `make run`'s default queue is derived from it.
    """

    key = models.CharField(max_length=32, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(pk=1), name="one_deployment")]

    def __str__(self) -> str:
        return self.key


# --- end issue 19 §1


# --- issue 14 §4: per-source API tokens (receipts.workers.sources, sidewisp.api) --------------------


class SourceToken(models.Model):
    """A token an agent that runs elsewhere posts receipts with (`POST /api/v1/receipts`).

    Scoped to one source name: it may write only runs that its source created. Only a
    SHA-256 digest of the secret is stored; the token itself is shown once, when it is made
    (receipts.workers.sources.issue). `key_id` is the token's public part, which finds the row.
    """

    source_name = models.CharField(max_length=100, db_index=True)
    note = models.CharField(max_length=200, blank=True)
    key_id = models.CharField(max_length=16, unique=True, editable=False)
    digest = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.PROTECT, editable=False
    )
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, related_name="+", on_delete=models.PROTECT, editable=False
    )

    class Meta:
        ordering = ["source_name", "-created_at"]

    def __str__(self) -> str:
        return f"{self.source_name} ({self.key_id})"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


# --- end issue 14 §4
