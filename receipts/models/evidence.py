"""The evidence: runs, handoffs, their append-only receipts, verdict history and middleware reports."""

from __future__ import annotations

import functools
from datetime import UTC, date, datetime

from django.db import models
from django.utils import timezone
from sidewisp_agent.kinds import ReportKind, RunStatus

from receipts.models.appendonly import AppendOnlyModel, AppendOnlyQuerySet
from receipts.verdicts import bundle
from receipts.verdicts.bundle import FINAL_STATUSES, PARTS, VERDICTS

FINAL_STATUS_PART = "final_status"
RECEIPT_PARTS = (*PARTS, FINAL_STATUS_PART)


class RunQuerySet(models.QuerySet):
    def for_operation(self, operation_id: str, source_name: str = "") -> RunQuerySet:
        """The run `operation_id` names in the namespace of `source_name` ("" the local apps' and hosted runs')."""
        return self.filter(source_name=source_name, operation_id=operation_id)

    def of_thread(self, run: Run) -> RunQuerySet:
        """The other runs of `run`'s thread (the same namespace), oldest first."""
        same = self.filter(source_name=run.source_name, thread_id=run.thread_id).exclude(pk=run.pk)
        return same.order_by("created_at", "pk")


class Run(models.Model):
    """One task given to the agent team, with a stable operation id across retries.

    Issue 28/29: a run is keyed by its source and its operation id (a remote source's ids live in its own
    namespace; local apps and hosted runs share ""), and many runs may share a thread (a chat app's turns: a new
    operation id per user turn on one thread).
    """

    class Status(models.TextChoices):
        QUEUED = RunStatus.QUEUED
        RUNNING = RunStatus.RUNNING
        WAITING = RunStatus.WAITING
        COMPLETE = RunStatus.COMPLETE
        FAILED = RunStatus.FAILED
        PARKED = RunStatus.PARKED

    class Source(models.TextChoices):
        AGENT = "agent"
        IMPORT = "import"

    class Mode(models.TextChoices):
        # Sidewisp's workers drive a registered graph (start, resume, re-verify, stop).
        HOSTED = "hosted"
        # The user's own process drives its graph through observe/aobserve; decisions go back to it.
        OBSERVED = "observed"

    operation_id = models.CharField(max_length=200)  # unique in its source's namespace (Meta.constraints)
    thread_id = models.CharField(max_length=200)
    # The registered graph a hosted run drives (agents.host.registry); for an observed run the name its
    # `configurable.graph_name` gives (issue 22 §2: the graph's team owns the run); empty for imported runs.
    graph = models.CharField(max_length=100, blank=True)  # indexed in Meta.indexes (run_graph)
    # A label the graph's factory reads from `configurable.scenario` (the demo graph's scenario).
    scenario = models.CharField(max_length=100, blank=True)
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.AGENT)
    mode = models.CharField(max_length=20, choices=Mode.choices, default=Mode.OBSERVED)
    # A hosted run's graph input until the graph holds it in its checkpoint; never shown or sent.
    input = models.JSONField(null=True, blank=True, editable=False)
    # An observed run's pending approval as names only: {"tool", "arg_types", "allowed_decisions",
    # "resume_token_id"}; Sidewisp has no access to that process's checkpoint.
    pending_call = models.JSONField(null=True, blank=True, editable=False)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED)  # Meta: run_status
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
    # issue 29 item 5: when a running observed run was found silent (no receipt for SIDEWISP_SILENT_AFTER
    # since heartbeat_at; receipts.ingest.silence); cleared by its next receipt.
    silent_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The run-level health (receipts.ingest.health computes it, the one place that does): the worst of
    # its handoff verdicts, its task status and its middleware alarms, with each reason named.
    health = models.CharField(max_length=20, blank=True)  # indexed in Meta.indexes (run_health)
    health_reasons = models.JSONField(default=list, blank=True)
    # --- issue 14 §4 (receipts API): the source whose token created the run; empty for local runs.
    # Only that source's tokens may post receipts for the run or claim its decisions (receipts.workers.sources).
    source_name = models.CharField(max_length=100, blank=True, default="", editable=False)  # run_thread leads with it
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
    # --- runs with no handoff (spec v1.3): the outcome parts a run with no handoff to carry them gives, kept
    # on the run so that check 7 judges it (receipts.verdicts.rules.classify_run); a run with handoffs keeps
    # them on its latest handoff as before and leaves these empty.
    # Nullable so that adding them is an ALTER TABLE on SQLite too (a rebuild would trip the rollup's triggers).
    final_status = models.CharField(max_length=20, null=True, blank=True, editable=False)  # noqa: DJ001
    verification = models.JSONField(null=True, blank=True, editable=False)
    # --- end runs with no handoff

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
            # issue 28: a thread's runs (the run page links the thread's other runs); a source's runs.
            models.Index(fields=["source_name", "thread_id"], name="run_thread"),
            # Plain: `db_index=True` also built a LIKE-prefix index no query reads (issue 32 §2, migration 0038).
            *(models.Index(fields=[name], name=f"run_{name}") for name in ("graph", "status", "health")),
        ]
        constraints = [
            # issue 29 §4: an operation id is unique within its source's namespace only (the id first: the search
            # by id across namespaces reads this index too).
            models.UniqueConstraint(fields=["operation_id", "source_name"], name="run_operation_source"),
        ]

    def __str__(self) -> str:
        return self.operation_id

    @property
    def is_silent(self) -> bool:
        """A running observed run whose app sent nothing for SIDEWISP_SILENT_AFTER: shown "silent since"."""
        return self.silent_at is not None and self.status == self.Status.RUNNING


class Handoff(models.Model):
    """A handoff's current evidence (the minimized parts) and its verdict."""

    # Unique in its run's source's namespace (Meta.constraints, issue 29 §4): a source can neither block nor probe
    # a local app's handoff ids or another source's.
    handoff_id = models.CharField(max_length=200)
    # Indexed with its verdict (Meta.indexes: handoff_run_verdict), which also serves the run's lookups.
    run = models.ForeignKey(Run, related_name="handoffs", on_delete=models.PROTECT, db_index=False)
    sender = models.CharField(max_length=200, blank=True)
    receiver = models.CharField(max_length=200, blank=True)
    route_version = models.CharField(max_length=200, blank=True)  # indexed in Meta.indexes (handoff_route_version)

    created_part = models.JSONField(null=True, blank=True)
    reduced_part = models.JSONField(null=True, blank=True)
    destination_part = models.JSONField(null=True, blank=True)
    wait_part = models.JSONField(null=True, blank=True)
    verification_part = models.JSONField(null=True, blank=True)
    final_status = models.CharField(max_length=20, blank=True, choices=[(s, s) for s in FINAL_STATUSES])

    verdict = models.CharField(max_length=40, choices=[(v, v) for v in VERDICTS])  # Meta.indexes: handoff_verdict
    # Its run's `source_name` (a run's never changes): the namespace of `handoff_id`.
    source_name = models.CharField(max_length=100, blank=True, default="", editable=False)
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
            # The waits page's "recently resolved" and its "mine": the newest resolved waits (of one owner).
            models.Index(
                fields=["wait_owner", "-updated_at", "-id"],
                condition=models.Q(wait_open=False, wait_part__isnull=False),
                name="handoff_resolved_waits_owner",
            ),
            # The overview's time window: counts and the problem trend from the index alone.
            models.Index(fields=["created_at", "verdict"], name="handoff_created_verdict"),
            # A run's handoffs, and "has a handoff with verdict V" (the runs list's verdict filter) from the
            # index alone.
            models.Index(fields=["run", "verdict"], name="handoff_run_verdict"),
            # The overview's "In progress" tile (spec v1.2 Settled): the few handoffs not settled yet, by time.
            models.Index(fields=["created_at"], condition=models.Q(settled_at__isnull=True), name="handoff_unsettled"),
            # Plain: `db_index=True` also built a LIKE-prefix index no query reads (issue 32 §2, migration 0038).
            *(models.Index(fields=[name], name=f"handoff_{name}") for name in ("verdict", "route_version")),
        ]
        constraints = [
            models.UniqueConstraint(fields=["handoff_id", "source_name"], name="handoff_id_source"),
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

    def save(self, *args, **kwargs) -> None:
        if self._state.adding:
            self.source_name = self.run.source_name  # the namespace of its id is its run's (issue 29 §4)
        super().save(*args, **kwargs)

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


@functools.lru_cache(maxsize=1024)  # asked once per receipt stored, of a few handoffs' creation times
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

    handoff = models.ForeignKey(Handoff, related_name="receipts", on_delete=models.PROTECT, db_index=False)  # see Meta
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
            # Also the handoff's index: it leads this one (issue 32 §2).
            models.UniqueConstraint(fields=["handoff", "part", "attempt"], name="receipt_once_per_attempt"),
        ]
        # pages at scale (issue 13): the overview's waits opened in its time window.
        indexes = [
            # The overview's waits opened in its window, and before it (an anti-join): with the handoff in the
            # index, the earlier ones are read from it alone (1.2k buffers instead of 4.9k at 1M receipts).
            models.Index(
                fields=["recorded_at"],
                include=["handoff"],
                condition=models.Q(part="wait"),
                name="receipt_waits_by_time_handoff",
            ),
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
        RETRY_EXHAUSTED = ReportKind.RETRY_EXHAUSTED
        TOOL_ERROR = ReportKind.TOOL_ERROR
        CALL_LIMIT = ReportKind.CALL_LIMIT
        SUMMARIZED = ReportKind.SUMMARIZED
        CONTEXT_EDITED = ReportKind.CONTEXT_EDITED
        MODEL_FAILED = ReportKind.MODEL_FAILED
        # Observation: evidence that could not be recorded as it was (a missing part is the truth).
        EVIDENCE_DROPPED = ReportKind.EVIDENCE_DROPPED
        # The run ended without any handoff recorded: nothing was proven.
        NO_HANDOFF = ReportKind.NO_HANDOFF
        # The graph ran with the middleware but outside `observe`: what only the observer sees is missing.
        UNOBSERVED_STREAM = ReportKind.UNOBSERVED_STREAM
        # A transfer the observer saw but cannot prove in full without SidewispMiddleware on that agent.
        UNSEEN_WITHOUT_MIDDLEWARE = ReportKind.UNSEEN_WITHOUT_MIDDLEWARE
        # A hosted graph with no outcome verifier registered: completion claims cannot be proven.
        NO_VERIFIER = ReportKind.NO_VERIFIER
        # The graph raised: the exception class and where (node, tool), never its message.
        GRAPH_ERROR = ReportKind.GRAPH_ERROR
        # An id or a name refused as credential-shaped, stored as `redacted:<digest>` (spec v1.3): the field.
        VALUE_REDACTED = ReportKind.VALUE_REDACTED
        # How long a tool call that is no transfer took (sidewisp_agent.toolcalls): its name, times and outcome.
        TOOL_CALL = ReportKind.TOOL_CALL

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
