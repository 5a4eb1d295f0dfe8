"""The agents' domain store (tickets, orders, refunds) and the per-agent limits.

Every domain row is keyed by the run's `operation_id` with a unique constraint,
so a repeated tool call, a re-run node or a re-delivered task is a no-op
instead of a second external action.
"""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.utils import timezone


class Ticket(models.Model):
    operation_id = models.CharField(max_length=200)
    ticket_id = models.CharField(max_length=40, unique=True)
    state = models.CharField(max_length=20, default="open")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["operation_id"], name="one_ticket_per_operation")]

    def __str__(self) -> str:
        return self.ticket_id


class Order(models.Model):
    operation_id = models.CharField(max_length=200)
    order_id = models.CharField(max_length=40, unique=True)
    sku = models.CharField(max_length=40)
    quantity = models.PositiveIntegerField()
    amount = models.PositiveIntegerField(help_text="Whole currency units.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["operation_id", "sku"], name="one_order_per_operation_sku")]

    def __str__(self) -> str:
        return self.order_id


class Refund(models.Model):
    operation_id = models.CharField(max_length=200)
    refund_id = models.CharField(max_length=40, unique=True)
    order_ref = models.CharField(max_length=40)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["operation_id", "order_ref"], name="one_refund_per_order")]

    def __str__(self) -> str:
        return self.refund_id


class AgentLimits(models.Model):
    """Legacy per-agent settings, superseded by `LimitsVersion`.

    Runs take their settings from the pinned `LimitsVersion`; an `AgentLimits`
    handed to `agents.limits.stack.build_middleware` is still understood (converted by
    `agents.limits.legacy.settings_from_agent_limits`).
    """

    agent = models.CharField(max_length=100, unique=True)
    tool_run_limit = models.PositiveIntegerField(default=8)
    tool_thread_limit = models.PositiveIntegerField(default=20)
    per_tool_run_limits = models.JSONField(default=dict, blank=True, help_text='{"tool_name": run_limit}')
    model_run_limit = models.PositiveIntegerField(default=12)
    model_thread_limit = models.PositiveIntegerField(default=40)
    tool_max_retries = models.PositiveIntegerField(default=2)
    model_max_retries = models.PositiveIntegerField(default=2)
    # Small delays: a retry must never hold a worker for seconds.
    retry_initial_delay = models.FloatField(default=0.01)
    retry_max_delay = models.FloatField(default=0.05)
    summarize_after_messages = models.PositiveIntegerField(default=24)
    summarize_keep_messages = models.PositiveIntegerField(default=6)
    context_edit_trigger_tokens = models.PositiveIntegerField(default=4000)
    context_edit_keep = models.PositiveIntegerField(default=3)
    approval_threshold = models.PositiveIntegerField(default=500, help_text="Orders above this amount need approval.")
    approval_owner = models.CharField(max_length=200, blank=True, default="ops-lead")
    approval_deadline_minutes = models.PositiveIntegerField(default=24 * 60)
    approval_reason = models.CharField(
        max_length=200, blank=True, help_text="Overrides each sensitive tool's own reason code when set."
    )

    class Meta:
        verbose_name_plural = "agent limits"

    def __str__(self) -> str:
        return self.agent

    @classmethod
    def for_agent(cls, agent: str, **overrides: object) -> AgentLimits:
        """The stored limits (or the defaults), with `overrides` applied in memory only."""
        limits = cls.objects.filter(agent=agent).first() or cls(agent=agent)
        for name, value in overrides.items():
            if not hasattr(limits, name):
                msg = f"unknown limit {name!r}"
                raise ValueError(msg)
            setattr(limits, name, value)
        return limits


class LimitsVersion(models.Model):
    """One saved version of the limits document (see `agents.limits`). Never edited: every change is a new version.

    The current version is the newest; a rollback saves an old document as a new version.
    """

    number = models.PositiveIntegerField(unique=True)
    document = models.JSONField(help_text='{"default": {section: {...}}, "agents": {agent: {section: {...}}}}')
    note = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    rolled_back_from = models.PositiveIntegerField(null=True, blank=True, help_text="The version this one restores.")

    class Meta:
        ordering = ["-number"]
        verbose_name = "limits version"

    def __str__(self) -> str:
        return f"v{self.number}"

    @classmethod
    def current(cls) -> LimitsVersion:
        """The newest version; the built-in defaults become version 1 when none is saved yet."""
        newest = cls.objects.order_by("-number").first()
        if newest is not None:
            return newest
        # Imported here: loading agents.limits (the package) imports these models.
        from agents.limits.defaults import DEFAULT_DOCUMENT

        try:
            with transaction.atomic():
                return cls.objects.create(number=1, document=DEFAULT_DOCUMENT, note="built-in defaults")
        except IntegrityError:  # another process created it first
            return cls.objects.get(number=1)

    @classmethod
    def save_new(
        cls, document: dict, *, user=None, note: str = "", rolled_back_from: int | None = None
    ) -> LimitsVersion:
        """Store `document` (already validated) as the next version number."""
        cls.current()
        for _ in range(5):
            number = (cls.objects.aggregate(top=models.Max("number"))["top"] or 0) + 1
            try:
                with transaction.atomic():
                    return cls.objects.create(
                        number=number,
                        document=document,
                        note=note,
                        created_by=user if getattr(user, "is_authenticated", False) else None,
                        rolled_back_from=rolled_back_from,
                    )
            except IntegrityError:  # two saves raced for the same number
                continue
        msg = "could not allocate a version number"
        raise RuntimeError(msg)

    def previous(self) -> LimitsVersion | None:
        return LimitsVersion.objects.filter(number__lt=self.number).order_by("-number").first()


class RunLimits(models.Model):
    """The limits version a run started with; it keeps it until it ends (resumes and re-deliveries too)."""

    run = models.OneToOneField("receipts.Run", related_name="limits_pin", on_delete=models.CASCADE)
    version = models.ForeignKey(LimitsVersion, related_name="runs", on_delete=models.PROTECT)
    pinned_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = "run limits"
        verbose_name_plural = "run limits"

    def __str__(self) -> str:
        return f"{self.run_id} → v{self.version.number}"

    @classmethod
    def pin(cls, run) -> LimitsVersion:
        """The run's version, pinning the current one on first use."""
        existing = cls.objects.select_related("version").filter(run=run).first()
        if existing is not None:
            return existing.version
        version = LimitsVersion.current()
        try:
            with transaction.atomic():
                cls.objects.create(run=run, version=version)
        except IntegrityError:  # a concurrent delivery pinned it first
            return cls.objects.select_related("version").get(run=run).version
        return version
