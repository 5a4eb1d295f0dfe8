"""The one room that performs operator actions (spec §5), and the deadline sweep's system decisions.

Every action follows the same steps, on the server, at execution time:

1. find the object (a guessed id that does not exist is audited and reported
   as not found);
2. check the permission *and* the object-level rule (deciding your own wait
   needs `decide_own_wait` and `wait_owner == username`; Django's backend has
   no object permissions, so this room is the check);
3. lock the object's row, check that its state permits the action (a
   transition the server enforces, whatever the page showed), and recognize
   a replay (same idempotency key, or a resume token already used);
4. change state, write the audit entry, and promise the work in the same transaction (an outbox
   intent, `receipts.notify.outbox`): it is sent right after commit, and again by the beat sweep if the
   broker was down. The action succeeds either way; its message says when the work is only queued.

Denied, refused and repeated attempts are audited too. Views only parse forms
and call one function here, always through this package (`actions.decide(...)`); nothing else writes
`Decision` rows or changes a run's auto-continue.

The modules: `policy` (who may do what, denials, refusals, the audit of an attempt), `steps` (what an
allowed action shares: row locks, wait parts, promised work), `waits` (decide, reassign, cancel),
`deadlines` (the sweep), `completions` (reopen, verify again, accept, resolve a false completion), `control` (stop,
resume, retry a run), `start` (start a hosted run), `declare` (declare the routes a run showed as a contract
version), `arguments` (edited tool arguments, plain Python).

May import: receipts.models, receipts.ingest, receipts.org, receipts.verdicts, receipts.workers,
receipts.notify.outbox; never: receipts.tasks, receipts.queries, sidewisp, agents.
"""

from __future__ import annotations

from receipts.actions.completions import (
    Settlement,
    reopen,
    reopen_in_flight,
    settle,
    settlement,
    settlements,
    verify_again,
)
from receipts.actions.control import resume_auto_continue, retry, retry_refusal, stop_auto_continue
from receipts.actions.deadlines import expire_overdue_waits
from receipts.actions.declare import DECLARE_ROUTES, may_declare, run_drafts
from receipts.actions.declare import declare as declare_routes
from receipts.actions.policy import (
    ACCEPT_TASK,
    AUDIT_DENIAL,
    AUDIT_READERS,
    CANCEL_WAIT,
    CHANGE_LIMITS,
    CONTROL,
    DECIDE_ANY,
    DECIDE_OWN,
    DECIDE_WAIT,
    DECISION_KINDS,
    FINISHED,
    PERMISSION_LABELS,
    POLICIES,
    REASSIGN,
    REASSIGN_WAIT,
    REOPEN,
    REOPEN_TASK,
    RESOLVE,
    RESOLVE_TASK,
    RESUME_RUN,
    RETRY_RUN,
    SETTLEMENTS,
    START,
    START_RUN,
    STOP_RUN,
    STOPPABLE,
    VERIFY_TASK,
    VIEW,
    Outcome,
    Policy,
    Result,
    User,
    check,
    denial,
    look,
    may,
    may_read_audit,
    needs,
)
from receipts.actions.start import MAX_AUDITED_INPUT_KEYS, check_start, start_run
from receipts.actions.waits import (
    cancel,
    decide,
    decision_on_open_wait,
    may_decide_as_owner,
    reassign,
    wait_owner_candidates,
)

__all__ = [
    "ACCEPT_TASK",
    "AUDIT_DENIAL",
    "AUDIT_READERS",
    "CANCEL_WAIT",
    "CHANGE_LIMITS",
    "CONTROL",
    "DECIDE_ANY",
    "DECIDE_OWN",
    "DECIDE_WAIT",
    "DECISION_KINDS",
    "DECLARE_ROUTES",
    "FINISHED",
    "MAX_AUDITED_INPUT_KEYS",
    "PERMISSION_LABELS",
    "POLICIES",
    "REASSIGN",
    "REASSIGN_WAIT",
    "REOPEN",
    "REOPEN_TASK",
    "RESOLVE",
    "RESOLVE_TASK",
    "RESUME_RUN",
    "RETRY_RUN",
    "SETTLEMENTS",
    "START",
    "START_RUN",
    "STOPPABLE",
    "STOP_RUN",
    "VERIFY_TASK",
    "VIEW",
    "Outcome",
    "Policy",
    "Result",
    "Settlement",
    "User",
    "cancel",
    "check",
    "check_start",
    "decide",
    "decision_on_open_wait",
    "declare_routes",
    "denial",
    "expire_overdue_waits",
    "look",
    "may",
    "may_decide_as_owner",
    "may_declare",
    "may_read_audit",
    "needs",
    "reassign",
    "reopen",
    "reopen_in_flight",
    "resume_auto_continue",
    "retry",
    "retry_refusal",
    "run_drafts",
    "settle",
    "settlement",
    "settlements",
    "start_run",
    "stop_auto_continue",
    "verify_again",
    "wait_owner_candidates",
]
