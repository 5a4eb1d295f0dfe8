"""The receipts app's models, one module per concern; every model is imported here, so `receipts.models.X` works.

`appendonly` (rows that refuse updates and deletes), `evidence` (runs, handoffs, receipts, verdict history,
middleware reports), `contracts` (route/context contract versions, wait reasons), `operations` (decisions, audit
log, outbox, deployment, source tokens), `deliveries` (notification channels, alert rules, deliveries), `policies`
(retention), `teams`, `rollups`.
May import: Django, receipts.verdicts, receipts.notify.destinations, receipts.org.identities; never: the other
rooms of receipts, agents, sidewisp.
"""

from receipts.models.appendonly import AppendOnlyError, AppendOnlyModel, AppendOnlyQuerySet, _pruning
from receipts.models.contracts import ContractVersion, WaitReason
from receipts.models.deliveries import AlertRule, Delivery, NotificationChannel, TaskDelivery
from receipts.models.evidence import (
    FINAL_STATUS_PART,
    RECEIPT_PARTS,
    Handoff,
    MiddlewareReport,
    Receipt,
    ReceiptQuerySet,
    Run,
    RunQuerySet,
    VerdictChange,
    handoff_month,
)
from receipts.models.operations import AuditEntry, Decision, Deployment, OutboxIntent, SourceToken
from receipts.models.policies import MAX_RETENTION_DAYS, RETENTION_DAY_FIELDS, RUN_BOUND_KINDS, RetentionPolicy
from receipts.models.rollups import VerdictBucket
from receipts.models.teams import Membership, Team, TeamGraph, TeamSource
from receipts.org.identities import SsoIdentity  # issue 22 §1: single sign-on's model

__all__ = [
    "FINAL_STATUS_PART",
    "MAX_RETENTION_DAYS",
    "RECEIPT_PARTS",
    "RETENTION_DAY_FIELDS",
    "RUN_BOUND_KINDS",
    "AlertRule",
    "AppendOnlyError",
    "AppendOnlyModel",
    "AppendOnlyQuerySet",
    "AuditEntry",
    "ContractVersion",
    "Decision",
    "Delivery",
    "Deployment",
    "Handoff",
    "Membership",
    "MiddlewareReport",
    "NotificationChannel",
    "OutboxIntent",
    "Receipt",
    "ReceiptQuerySet",
    "RetentionPolicy",
    "Run",
    "RunQuerySet",
    "SourceToken",
    "SsoIdentity",
    "TaskDelivery",
    "Team",
    "TeamGraph",
    "TeamSource",
    "VerdictBucket",
    "VerdictChange",
    "WaitReason",
    "_pruning",
    "handoff_month",
]
