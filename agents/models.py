"""The agents' domain store (tickets, orders, refunds) and the per-agent limits.

Every domain row is keyed by the run's `operation_id` with a unique constraint,
so a repeated tool call, a re-run node or a re-delivered task is a no-op
instead of a second external action.
"""

from __future__ import annotations

from django.db import models
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
    """The middleware settings of one agent; an agent without a row gets the defaults."""

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
