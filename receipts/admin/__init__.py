"""The receipts admin: contracts as immutable versions, wait reasons, read-only evidence, source tokens,
notification channels and alert rules, teams, and the retention policy.

Django's admin autodiscovery imports this package; importing each module registers its pages. Every
admin class stays importable from here (agents.admin and sidewisp.admin build on the shared ones).
"""

from __future__ import annotations

from receipts.admin.base import (
    CHANGE_LIMITS,
    CONFIRM_FIELD,
    NO_SAVE_VARIANTS,
    ImmutableAdmin,
    PrettyJSONField,
    ReadOnlyAdmin,
    ReviewedAddAdmin,
    iso_time,
)
from receipts.admin.contracts import ContractVersionAdmin, ContractVersionForm, WaitReasonAdmin
from receipts.admin.evidence import AuditEntryAdmin, HandoffAdmin, MiddlewareReportAdmin, ReceiptAdmin, RunAdmin
from receipts.admin.notifications import (
    AlertRuleAdmin,
    AlertRuleForm,
    DeliveryAdmin,
    NotificationChannelAdmin,
    NotificationChannelForm,
)
from receipts.admin.teams import MembershipInline, TeamAdmin, TeamGraphInline, TeamSourceInline
from receipts.admin.tokens import SourceTokenAdmin, SourceTokenForm

# issue 22 §3: the retention policy (its own module, in the retention room).
from receipts.retention import admin as retention_admin

__all__ = [
    "CHANGE_LIMITS",
    "CONFIRM_FIELD",
    "NO_SAVE_VARIANTS",
    "AlertRuleAdmin",
    "AlertRuleForm",
    "AuditEntryAdmin",
    "ContractVersionAdmin",
    "ContractVersionForm",
    "DeliveryAdmin",
    "HandoffAdmin",
    "ImmutableAdmin",
    "MembershipInline",
    "MiddlewareReportAdmin",
    "NotificationChannelAdmin",
    "NotificationChannelForm",
    "PrettyJSONField",
    "ReadOnlyAdmin",
    "ReceiptAdmin",
    "ReviewedAddAdmin",
    "RunAdmin",
    "SourceTokenAdmin",
    "SourceTokenForm",
    "TeamAdmin",
    "TeamGraphInline",
    "TeamSourceInline",
    "WaitReasonAdmin",
    "iso_time",
    "retention_admin",
]
