"""The evidence domain: runs, handoffs, their append-only receipts, contracts."""

from __future__ import annotations

import contextvars
from datetime import UTC, date, datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from receipts.notify import destinations
from receipts.org.identities import SsoIdentity  # noqa: F401  (issue 22 §1: single sign-on's model)
from receipts.verdicts import bundle
from receipts.verdicts.bundle import FINAL_STATUSES, PARTS, VERDICTS

FINAL_STATUS_PART = "final_status"
RECEIPT_PARTS = (*PARTS, FINAL_STATUS_PART)


class AppendOnlyError(Exception):
    """Raised when code tries to change or delete an append-only row."""


# issue 22 §3: set only inside `receipts.retention.pruning()`, the one deliberate path that removes evidence.
_pruning: contextvars.ContextVar[bool] = contextvars.ContextVar("sidewisp_pruning", default=False)


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        msg = f"{self.model.__name__} rows are append-only"
        raise AppendOnlyError(msg)

    def delete(self):
        msg = f"{self.model.__name__} rows are append-only"
        raise AppendOnlyError(msg)

    def prune(self) -> int:
        """Remove these rows in one plain DELETE (no signals, no cascade): retention only, never elsewhere."""
        self._check_pruning()
        return self._raw_delete(self.db)

    def detach(self, **nulls: None) -> int:
        """Clear the named foreign keys (retention keeps an entry whose run it prunes); nothing else changes."""
        self._check_pruning()
        if any(value is not None for value in nulls.values()):
            msg = "detach only clears foreign keys"
            raise AppendOnlyError(msg)
        return super().update(**nulls)

    def _check_pruning(self) -> None:
        if not _pruning.get():
            msg = f"{self.model.__name__} rows are append-only; only receipts.retention prunes them"
            raise AppendOnlyError(msg)


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if not self._state.adding:
            msg = f"{type(self).__name__} rows are append-only"
            raise AppendOnlyError(msg)
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        msg = f"{type(self).__name__} rows are append-only"
        raise AppendOnlyError(msg)


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
        return Handoff.objects.filter(route_version=self.version).exists()


class WaitReason(models.Model):
    code = models.CharField(max_length=200, unique=True)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["code"]

    def __str__(self) -> str:
        return self.code


class RunQuerySet(models.QuerySet):
    def for_operation(self, operation_id: str) -> RunQuerySet:
        return self.filter(operation_id=operation_id)


class Run(models.Model):
    """One task given to the agent team, with a stable operation id across retries."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        WAITING = "waiting"
        COMPLETE = "complete"
        FAILED = "failed"
        PARKED = "parked"

    class Source(models.TextChoices):
        AGENT = "agent"
        IMPORT = "import"

    class Mode(models.TextChoices):
        # Sidewisp's workers drive a registered graph (start, resume, re-verify, stop).
        HOSTED = "hosted"
        # The user's own process drives its graph through observe/aobserve; decisions go back to it.
        OBSERVED = "observed"

    operation_id = models.CharField(max_length=200, unique=True)
    thread_id = models.CharField(max_length=200, unique=True)
    # The registered graph a hosted run drives (agents.host.registry); for an observed run the name its
    # `configurable.graph_name` gives (issue 22 §2: the graph's team owns the run); empty for imported runs.
    graph = models.CharField(max_length=100, blank=True, db_index=True)
    # A label the graph's factory reads from `configurable.scenario` (the demo graph's scenario).
    scenario = models.CharField(max_length=100, blank=True)
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.AGENT)
    mode = models.CharField(max_length=20, choices=Mode.choices, default=Mode.OBSERVED)
    # A hosted run's graph input until the graph holds it in its checkpoint; never shown or sent.
    input = models.JSONField(null=True, blank=True, editable=False)
    # An observed run's pending approval as names only: {"tool", "arg_types", "allowed_decisions",
    # "resume_token_id"}; Sidewisp has no access to that process's checkpoint.
    pending_call = models.JSONField(null=True, blank=True, editable=False)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED, db_index=True)
    dry_run = models.BooleanField(default=False)
    auto_continue = models.BooleanField(default=True)
    # Every event about this run carries the next number, so a page can see a gap.
    seq = models.PositiveBigIntegerField(default=0)
    deliveries = models.PositiveIntegerField(default=0)
    # The per-run lease: at most one worker drives a run's graph thread at a time
    # (LangGraph does not prevent two writers on one thread).
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=200, blank=True, help_text="Exception class only, never its text.")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The run-level health (receipts.ingest.health computes it, the one place that does): the worst of
    # its handoff verdicts, its task status and its middleware alarms, with each reason named.
    health = models.CharField(max_length=20, blank=True, db_index=True)
    health_reasons = models.JSONField(default=list, blank=True)
    # --- issue 14 §4 (receipts API): the source whose token created the run; empty for local runs.
    # Only that source's tokens may post receipts for the run or claim its decisions (receipts.workers.sources).
    source_name = models.CharField(max_length=100, blank=True, default="", db_index=True, editable=False)
    # --- end issue 14 §4
    # --- pages at scale (issue 13): the run's summary, kept by receipts.ingest.health.refresh with its health, so
    # the runs list reads it instead of counting every run's handoffs before its LIMIT.
    handoff_count = models.PositiveIntegerField(default=0, editable=False)
    # Handoffs whose verdict is neither healthy nor waiting on approval (settled false completions too).
    problem_count = models.PositiveIntegerField(default=0, editable=False)
    # False completions no operator has accepted or resolved yet.
    open_false_count = models.PositiveIntegerField(default=0, editable=False)
    # The verdict of the handoff that changed last.
    latest_verdict = models.CharField(max_length=40, blank=True, editable=False)
    # --- end pages at scale

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        # pages at scale (issue 13): newest first with a tiebreaker (the runs list's keyset pages); the
        # runs holding open false completions (their count on the overview and the false-completions page).
        indexes = [
            models.Index(fields=["created_at", "id"], name="run_newest"),
            models.Index(
                fields=["open_false_count"], condition=models.Q(open_false_count__gt=0), name="run_open_false"
            ),
        ]

    def __str__(self) -> str:
        return self.operation_id


class Handoff(models.Model):
    """A handoff's current evidence (the minimized parts) and its verdict."""

    handoff_id = models.CharField(max_length=200, unique=True)
    # Indexed with its verdict (Meta.indexes: handoff_run_verdict), which also serves the run's lookups.
    run = models.ForeignKey(Run, related_name="handoffs", on_delete=models.PROTECT, db_index=False)
    sender = models.CharField(max_length=200, blank=True)
    receiver = models.CharField(max_length=200, blank=True)
    route_version = models.CharField(max_length=200, blank=True, db_index=True)

    created_part = models.JSONField(null=True, blank=True)
    reduced_part = models.JSONField(null=True, blank=True)
    destination_part = models.JSONField(null=True, blank=True)
    wait_part = models.JSONField(null=True, blank=True)
    verification_part = models.JSONField(null=True, blank=True)
    final_status = models.CharField(max_length=20, blank=True, choices=[(s, s) for s in FINAL_STATUSES])

    verdict = models.CharField(max_length=40, choices=[(v, v) for v in VERDICTS], db_index=True)
    boundary = models.CharField(max_length=40, blank=True)
    next_move = models.CharField(max_length=200, blank=True)
    reason = models.CharField(max_length=300, blank=True)
    boundaries = models.JSONField(default=dict)
    classified_at = models.DateTimeField(null=True, blank=True)

    # Denormalized from the wait part so the inbox can sort and filter in SQL.
    wait_open = models.BooleanField(default=False)
    wait_owner = models.CharField(max_length=200, blank=True)
    wait_deadline = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now, db_index=True)
    # Settled verdicts (spec v1.2): when no more evidence was due (a settle entry, or the run ended). Until
    # then a verdict that lacks a part still due is shown as in progress (receipts.ingest.health.due_part).
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-updated_at"]
        # pages at scale (issue 13): only what a page query uses. Recording updates a handoff on every
        # receipt and each index is rewritten then; sender, receiver and the wait columns lost their own.
        indexes = [
            # The waits inbox and its "mine": open waits only, due soonest first.
            models.Index(fields=["wait_deadline", "id"], condition=models.Q(wait_open=True), name="handoff_open_waits"),
            models.Index(fields=["wait_owner"], condition=models.Q(wait_open=True), name="handoff_open_waits_owner"),
            # The overview's time window: counts and the problem trend from the index alone.
            models.Index(fields=["created_at", "verdict"], name="handoff_created_verdict"),
            # A run's handoffs, and "has a handoff with verdict V" (the runs list's verdict filter) from the
            # index alone.
            models.Index(fields=["run", "verdict"], name="handoff_run_verdict"),
        ]
        # Sidewisp's permissions. Default deny: a user without a group has none.
        permissions = [
            ("view_dashboard", "Can view the health dashboard"),
            ("decide_own_wait", "Can approve or reject waits they own"),
            ("decide_any_wait", "Can approve or reject any wait"),
            ("reopen_task", "Can reopen a false-complete task"),
            ("control_run", "Can stop or resume auto-continue of a run"),
            ("reassign_wait", "Can reassign or cancel a wait"),
            ("change_limits", "Can change limits and contracts"),
            ("start_run", "Can start a run of a registered graph"),
            ("resolve_task", "Can accept or resolve a false-complete task"),
            # issue 22 §2: Sidewisp's admins see and act on every team's runs (receipts.org.teams).
            ("view_all_teams", "Can see and act on the runs of every team"),
        ]

    def __str__(self) -> str:
        return self.handoff_id

    def part(self, name: str) -> dict | None:
        return getattr(self, f"{name}_part")

    def to_bundle(self) -> bundle.Bundle:
        data: dict = {
            "schema": bundle.SCHEMA,
            "handoff_id": self.handoff_id,
            "operation_id": self.run.operation_id,
            "final_status": self.final_status or None,
        }
        for name in PARTS:
            if (value := self.part(name)) is not None:
                data[name] = value
        return bundle.parse_bundle(data)


def handoff_month(created_at: datetime) -> date:
    """The first day of the UTC month a handoff was created in: its receipts' partition (issue 22 §3)."""
    utc = created_at.astimezone(UTC) if timezone.is_aware(created_at) else created_at
    return date(utc.year, utc.month, 1)


class ReceiptQuerySet(AppendOnlyQuerySet):
    def bulk_create(self, objs, *args, **kwargs):
        objs = list(objs)
        for receipt in objs:
            receipt.fill_handoff_month()
        return super().bulk_create(objs, *args, **kwargs)


class Receipt(AppendOnlyModel):
    """One recorded part, exactly as minimized. Never updated; removed only by retention (receipts.retention)."""

    handoff = models.ForeignKey(Handoff, related_name="receipts", on_delete=models.PROTECT)
    part = models.CharField(max_length=20, choices=[(p, p) for p in RECEIPT_PARTS])
    # Recording the same part for the same attempt twice is a no-op.
    attempt = models.CharField(max_length=200)
    payload = models.JSONField(null=True)
    recorded_at = models.DateTimeField(default=timezone.now)
    # issue 22 §3: the month of the handoff's created_at (`handoff_month`), filled by save() and bulk_create().
    # On PostgreSQL the table is partitioned by it (migration 0025); it depends on the handoff alone, so
    # (handoff, part, attempt, handoff_month) is unique exactly when (handoff, part, attempt) is.
    handoff_month = models.DateField(editable=False)

    objects = ReceiptQuerySet.as_manager()

    class Meta:
        ordering = ["recorded_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["handoff", "part", "attempt"], name="receipt_once_per_attempt"),
        ]
        # pages at scale (issue 13): the overview's waits opened in its time window.
        indexes = [
            models.Index(fields=["recorded_at"], condition=models.Q(part="wait"), name="receipt_waits_by_time"),
        ]

    def __str__(self) -> str:
        return f"{self.handoff_id}:{self.part}:{self.attempt}"

    def save(self, *args, **kwargs):
        self.fill_handoff_month()
        super().save(*args, **kwargs)

    def fill_handoff_month(self) -> None:
        if self.handoff_month is None:
            self.handoff_month = handoff_month(self.handoff.created_at)


class VerdictChange(AppendOnlyModel):
    """One entry of a handoff's verdict history: what it became, when, and what moved it."""

    handoff = models.ForeignKey(Handoff, related_name="verdict_changes", on_delete=models.PROTECT)
    verdict = models.CharField(max_length=40, choices=[(v, v) for v in VERDICTS])
    boundary = models.CharField(max_length=40, blank=True)
    # The receipt part, the reclassification or the operator action that changed it (a code, never text).
    cause = models.CharField(max_length=60, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.handoff_id}:{self.verdict}"


class MiddlewareReport(AppendOnlyModel):
    """What the other middleware did to a run (retries, limits, summaries), minimized."""

    class Kind(models.TextChoices):
        RETRY_EXHAUSTED = "retry_exhausted"
        TOOL_ERROR = "tool_error"
        CALL_LIMIT = "call_limit"
        SUMMARIZED = "summarized"
        CONTEXT_EDITED = "context_edited"
        MODEL_FAILED = "model_failed"
        # Observation: evidence that could not be recorded as it was (a missing part is the truth).
        EVIDENCE_DROPPED = "evidence_dropped"
        # The run ended without any handoff recorded: nothing was proven.
        NO_HANDOFF = "no_handoff"
        # The graph ran with the middleware but outside `observe`: what only the observer sees is missing.
        UNOBSERVED_STREAM = "unobserved_stream"
        # A transfer the observer saw but cannot prove in full without SidewispMiddleware on that agent.
        UNSEEN_WITHOUT_MIDDLEWARE = "unseen_without_middleware"
        # A hosted graph with no outcome verifier registered: completion claims cannot be proven.
        NO_VERIFIER = "no_verifier"
        # The graph raised: the exception class and where (node, tool), never its message.
        GRAPH_ERROR = "graph_error"

    run = models.ForeignKey(Run, related_name="reports", on_delete=models.PROTECT)
    agent = models.CharField(max_length=200)
    kind = models.CharField(max_length=40, choices=Kind.choices)
    # Names, counts and codes only.
    detail = models.JSONField(default=dict)
    attempt = models.CharField(max_length=200)
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["recorded_at", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["run", "agent", "kind", "attempt"], name="report_once_per_attempt"),
        ]

    def __str__(self) -> str:
        return f"{self.agent}:{self.kind}"


class Decision(models.Model):
    """A person's (or the system's) answer to a wait, bound to its resume token.

    One decision per resume token: the unique constraint makes the token single
    use, so a double click, a second tab or a racing approver changes nothing.
    """

    class Kind(models.TextChoices):
        APPROVE = "approve"
        REJECT = "reject"
        EDIT = "edit"

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

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    verdict = models.CharField(
        max_length=40, blank=True, choices=[(v, v) for v in VERDICTS], help_text="Verdict rules: the verdict."
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
# --- issue 22 §2: teams (receipts.org.teams scopes every query by them) ---------------------------


class Team(models.Model):
    """A group of people that owns graphs (by name) and remote sources, and sees only their runs.

    The team that `owns_unclaimed` (the default team, made by migration 0023) also owns every graph and
    source no team claims, and counts among its members every user who belongs to no team.
    """

    slug = models.SlugField(max_length=100, unique=True, help_text="The name identity-provider claims use.")
    name = models.CharField(max_length=200)
    owns_unclaimed = models.BooleanField(
        default=False,
        help_text="The default team: owns the graphs and sources no team claims; users in no team belong to it.",
    )
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="sidewisp_teams", blank=True
    )

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.UniqueConstraint(
                fields=["owns_unclaimed"], condition=models.Q(owns_unclaimed=True), name="one_default_team"
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A user in a team, set locally (the admin) or through the identity provider's claim (every login)."""

    class Origin(models.TextChoices):
        LOCAL = "local", "Set locally"
        CLAIM = "claim", "From the identity provider's claim"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships")
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.LOCAL)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_team")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.origin})"


class TeamGraph(models.Model):
    """A graph name a team owns: the local runs (hosted and observed) of that graph are the team's."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="graphs")
    graph = models.CharField(max_length=100, unique=True, help_text="A graph has one owner.")

    class Meta:
        ordering = ["graph"]

    def __str__(self) -> str:
        return self.graph


class TeamSource(models.Model):
    """A remote source a team owns: the runs that source's tokens created are the team's."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="sources")
    source_name = models.CharField(max_length=100, unique=True, help_text="A source has one owner.")

    class Meta:
        ordering = ["source_name"]

    def __str__(self) -> str:
        return self.source_name


# --- end issue 22 §2
# --- issue 20 §4: the overview's rollups (receipts.queries.rollups; migration 0021 adds the triggers that keep them)


class VerdictBucket(models.Model):
    """A change in how many handoffs created in an hour (UTC) have a verdict now: +1 or -1, or a compacted sum.

    Written only by the database: triggers on the handoff table append a +1 when a handoff is inserted, a
    -1 / +1 pair when its verdict (or creation time) changes and a -1 when it is deleted, so every write
    path, ORM or bulk SQL, keeps it exact; `receipts.queries.rollups.compact` folds the deltas into one row per hour
    and verdict. The sum over an hour's rows is that hour's count by current verdict.
    """

    bucket = models.DateTimeField()
    verdict = models.CharField(max_length=40)
    n = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["bucket", "verdict", "n"], name="verdict_bucket_time")]

    def __str__(self) -> str:
        return f"{self.bucket:%Y-%m-%d %H}h {self.verdict} {self.n:+d}"


# --- end issue 20 §4
