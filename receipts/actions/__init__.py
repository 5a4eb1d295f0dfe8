"""The one module that performs operator actions (spec §5), and the deadline sweep's system decisions.

Every action follows the same steps, on the server, at execution time:

1. find the object (a guessed id that does not exist is audited and reported
   as not found);
2. check the permission *and* the object-level rule (deciding your own wait
   needs `decide_own_wait` and `wait_owner == username`; Django's backend has
   no object permissions, so this module is the check);
3. lock the object's row, check that its state permits the action (a
   transition the server enforces, whatever the page showed), and recognize
   a replay (same idempotency key, or a resume token already used);
4. change state, write the audit entry, and promise the work in the same transaction (an outbox
   intent, `receipts.notify.outbox`): it is sent right after commit, and again by the beat sweep if the
   broker was down. The action succeeds either way; its message says when the work is only queued.

Denied, refused and repeated attempts are audited too. Views only parse forms
and call one function here; nothing else writes `Decision` rows or changes a
run's auto-continue.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, Permission
from django.db import DataError, IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from receipts.actions import arguments
from receipts.ingest import runs, storable
from receipts.ingest.recording import note_settlement, reclassify, reclassify_overdue_waits, record
from receipts.models import AuditEntry, Decision, Handoff, OutboxIntent, Run, VerdictChange
from receipts.notify import outbox
from receipts.org import audit, teams
from receipts.org.roles import ROLES
from receipts.verdicts import bundle
from receipts.workers import runtime

User = AbstractBaseUser | AnonymousUser

VIEW = "receipts.view_dashboard"
DECIDE_OWN = "receipts.decide_own_wait"
DECIDE_ANY = "receipts.decide_any_wait"
REOPEN = "receipts.reopen_task"
CONTROL = "receipts.control_run"
REASSIGN = "receipts.reassign_wait"
CHANGE_LIMITS = "receipts.change_limits"
START = "receipts.start_run"
RESOLVE = "receipts.resolve_task"

# Each permission in words, for every message a person reads (sidewisp.pages.labels shows the same words).
PERMISSION_LABELS: dict[str, str] = {
    VIEW: "view-dashboard",
    DECIDE_OWN: "approve-own-waits",
    DECIDE_ANY: "approve-any-wait",
    REOPEN: "reopen-task",
    RESOLVE: "accept-or-resolve-task",
    CONTROL: "run-control",
    REASSIGN: "reassign-wait",
    CHANGE_LIMITS: "change-limits",
    START: "start-run",
}

# Who may read the audit log: operators (control_run) and admins (change_limits).
AUDIT_READERS = (CONTROL, CHANGE_LIMITS)
# The verdicts whose runs an operator may stop (spec §5).
STOPPABLE = ("STALE_CONTROL", "OPEN_TOOL_PROTOCOL")
# A run in one of these states has ended: nothing drives it, so stop, resume and retry cannot work.
FINISHED = (Run.Status.COMPLETE, Run.Status.FAILED)
DECISION_KINDS = ("approve", "reject", "edit")


@dataclass(frozen=True)
class Policy:
    """Who may perform an action: one of `permissions` (plus view), and for waits the owner rule."""

    name: str
    permissions: tuple[str, ...]
    object_type: str  # "handoff" or "run"
    owner_rule: bool = False  # DECIDE_OWN counts only for the wait's owner
    reason_required: bool = False
    doing: str = ""  # the action in words, as a sentence starts: "Reopening this task"


DECIDE_WAIT = Policy("wait.decide", (DECIDE_OWN, DECIDE_ANY), "handoff", owner_rule=True, doing="Deciding this wait")
REASSIGN_WAIT = Policy("wait.reassign", (REASSIGN,), "handoff", doing="Reassigning this wait")
CANCEL_WAIT = Policy("wait.cancel", (REASSIGN,), "handoff", reason_required=True, doing="Cancelling this wait")
REOPEN_TASK = Policy("task.reopen", (REOPEN,), "handoff", reason_required=True, doing="Reopening this task")
ACCEPT_TASK = Policy("task.accept", (RESOLVE,), "handoff", reason_required=True, doing="Accepting this task as is")
RESOLVE_TASK = Policy("task.resolve", (RESOLVE,), "handoff", reason_required=True, doing="Marking this task resolved")
STOP_RUN = Policy("run.stop", (CONTROL,), "run", reason_required=True, doing="Stopping this run's auto-continue")
RESUME_RUN = Policy("run.resume", (CONTROL,), "run", reason_required=True, doing="Resuming this run's auto-continue")
RETRY_RUN = Policy("run.retry", (CONTROL,), "run", reason_required=True, doing="Retrying this run from its checkpoint")
START_RUN = Policy("run.start", (START,), "run", doing="Starting a run")
POLICIES = (
    DECIDE_WAIT,
    REASSIGN_WAIT,
    CANCEL_WAIT,
    REOPEN_TASK,
    ACCEPT_TASK,
    RESOLVE_TASK,
    STOP_RUN,
    RESUME_RUN,
    RETRY_RUN,
    START_RUN,
)
# How an operator closes a false completion without a new verification (a VerdictChange's cause;
# receipts.queries.dashboard.SETTLEMENT_CAUSES names the same two).
SETTLEMENTS = (ACCEPT_TASK.name, RESOLVE_TASK.name)


class Outcome:
    DONE = "done"
    NOOP = "noop"
    DENIED = "denied"
    REFUSED = "refused"
    NOT_FOUND = "not_found"


@dataclass(frozen=True)
class Result:
    outcome: str
    message: str
    run: Run | None = None
    handoff: Handoff | None = None
    decision: Decision | None = None
    # Who was checked (check() sets it): a confirmation page offers what this user may choose.
    actor: User | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in (Outcome.DONE, Outcome.NOOP)


# --- permissions ------------------------------------------------------------------


def may(user: User | None, policy: Policy, handoff: Handoff | None = None) -> bool:
    """The permission and object check for `policy` on `handoff` (default deny)."""
    if user is None or not user.is_authenticated or not user.is_active or not user.has_perm(VIEW):
        return False
    if policy.owner_rule:
        if user.has_perm(DECIDE_ANY):
            return True
        return (
            user.has_perm(DECIDE_OWN)
            and handoff is not None
            and bool(handoff.wait_owner)
            and handoff.wait_owner == user.get_username()
        )
    return any(user.has_perm(p) for p in policy.permissions)


def may_read_audit(user: User | None) -> bool:
    if user is None or not user.is_authenticated or not user.is_active or not user.has_perm(VIEW):
        return False
    return any(user.has_perm(p) for p in AUDIT_READERS)


def look(user: User | None, policy: Policy, object_id: object) -> Result:
    """Find the policy's object and say whether `user` may act on it, writing nothing.

    For pages that only show (a confirmation page, the action links): opening a page is not an
    attempt. Every action calls check(), which asks the same and audits a denial.
    """
    obj = _find(policy, object_id, user)
    if obj is None:
        return Result(Outcome.NOT_FOUND, f"There is no {policy.object_type} {object_id}.")
    handoff = obj if isinstance(obj, Handoff) else None
    run = obj if isinstance(obj, Run) else obj.run
    if not may(user, policy, handoff):
        return Result(Outcome.DENIED, denial(user, policy, handoff), run=run, handoff=handoff)
    return Result(Outcome.DONE, "", run=run, handoff=handoff, actor=user)


def check(user: User | None, policy: Policy, object_id: object, *, action: str | None = None) -> Result:
    """look(), auditing a denial and an unknown id: every action calls it before anything else."""
    action = action or policy.name
    found = look(user, policy, object_id)
    if found.outcome == Outcome.NOT_FOUND:
        audit.log(
            actor=user,
            action=action,
            object_type=policy.object_type,
            object_id=str(object_id)[:200],
            outcome=AuditEntry.Outcome.DENIED,
            reason="no such object",
        )
    elif found.outcome == Outcome.DENIED:
        obj = found.handoff if found.handoff is not None else found.run
        _log(user, action, policy, obj, AuditEntry.Outcome.DENIED, reason=found.message)
    return found


# --- approve, reject, edit ----------------------------------------------------------


def decide(
    *,
    user: User,
    handoff_id: object,
    kind: str,
    token: str,
    key: str,
    reason: str = "",
    edited_args: Mapping[str, object] | None = None,
    now: datetime | None = None,
) -> Result:
    """Answer an open wait with a decision bound to its resume token, then resume the graph after commit.

    The token is single use (one Decision per run and token): a replay, a second
    tab or a racing approver gets a no-op that names who decided and when.
    """
    if kind not in DECISION_KINDS:
        raise ValueError(f"kind must be one of {', '.join(DECISION_KINDS)}")
    action = f"wait.{kind}"
    found = check(user, DECIDE_WAIT, handoff_id, action=action)
    if not found.ok:
        return found
    now = now or timezone.now()
    with transaction.atomic():
        handoff = Handoff.objects.select_for_update().select_related("run").get(pk=found.handoff.pk)
        if (earlier := _decision_for(handoff, token)) is not None:
            return _already_decided(user, action, handoff, earlier, key)
        if not may(user, DECIDE_WAIT, handoff):
            # Checked again under the row lock: a reassignment that committed first took the wait away.
            refusal = f"This wait was reassigned to {handoff.wait_owner or 'nobody'} meanwhile; nothing changed."
            return _refuse(user, DECIDE_WAIT, handoff, key, refusal, action=action)
        if refusal := _decision_refusal(handoff, kind, token, reason, edited_args, now):
            return _refuse(user, DECIDE_WAIT, handoff, key, refusal, action=action)
        try:
            with transaction.atomic():
                decision = Decision.objects.create(
                    run=handoff.run,
                    handoff=handoff,
                    resume_token_id=token,
                    kind=kind,
                    message=reason[:500],
                    edited_args=dict(edited_args) if kind == Decision.Kind.EDIT else None,
                    decided_by=user,
                    decided_at=now,
                )
        except IntegrityError:
            # Another approver got there between our check and our insert.
            return _already_decided(user, action, handoff, _decision_for(handoff, token, any_handoff=True), key)
        entry = _log(
            user,
            action,
            DECIDE_WAIT,
            handoff,
            AuditEntry.Outcome.DONE,
            reason=reason,
            key=key,
            detail={"decision": decision.pk, "edited_keys": sorted(edited_args or {}) if kind == "edit" else []},
        )
        intent = _promise(OutboxIntent.Kind.RESUME, decision.pk, handoff.run, entry)
    verb = {"approve": "approved", "reject": "rejected", "edit": "approved with edited arguments"}[kind]
    message = _sent_or_queued(
        intent,
        f"Wait {verb}; the run resumes from its checkpoint.",
        f"Wait {verb}. The resume is queued: the run resumes from its checkpoint as soon as a worker is reachable.",
    )
    return Result(Outcome.DONE, message, handoff.run, handoff, decision)


def _decision_for(handoff: Handoff, token: str, *, any_handoff: bool = False) -> Decision | None:
    found = Decision.objects.select_related("decided_by").filter(run=handoff.run, resume_token_id=token)
    return (found if any_handoff else found.filter(handoff=handoff)).first()


def _already_decided(user: User, action: str, handoff: Handoff, earlier: Decision | None, key: str) -> Result:
    who = _name(earlier.decided_by) if earlier else "someone"
    when = f"{earlier.decided_at:%Y-%m-%d %H:%M:%S} UTC" if earlier else "earlier"
    kind = earlier.kind if earlier else "decided"
    message = f"Already decided ({kind}) by {who} at {when}; nothing changed."
    _log(
        user,
        action,
        DECIDE_WAIT,
        handoff,
        AuditEntry.Outcome.NOOP,
        reason=message,
        key=key,
        detail={"decision": earlier.pk if earlier else None},
    )
    return Result(Outcome.NOOP, message, handoff.run, handoff, earlier)


def _decision_refusal(
    handoff: Handoff, kind: str, token: str, reason: str, edited: Mapping | None, now: datetime
) -> str:
    wait = handoff.wait_part or {}
    if not handoff.wait_open:
        return "This wait is no longer open."
    if not wait.get("resume_token_id") or token != wait.get("resume_token_id"):
        return "The resume token does not belong to this wait."
    if handoff.wait_deadline is None or handoff.wait_deadline <= now:
        return "The wait's deadline has passed; the deadline sweep decides it now."
    if handoff.verdict != "WAITING_ON_APPROVAL":
        return f"Only a valid wait can be decided (this one is {handoff.verdict}); reassign it first."
    if not runtime.current().can_resume(handoff.run):
        return "This run has no agent graph to resume."
    if kind == Decision.Kind.REJECT and not reason.strip():
        return "A rejection needs a reason."
    return _allowed_by_the_interrupt(handoff.run, kind, edited)


def _allowed_by_the_interrupt(run: Run, kind: str, edited: Mapping | None) -> str:
    # The interrupt's own review config decides which answers it takes; checked here so a
    # decision the graph would refuse never uses up the token.
    pending = runtime.current().pending_call(run)
    if pending is None:
        return "An edit needs the pending tool call, which could not be read." if kind == Decision.Kind.EDIT else ""
    if kind not in pending.allowed_decisions:
        return f"This approval does not allow “{kind}” (allowed: {', '.join(pending.allowed_decisions)})."
    if kind == Decision.Kind.EDIT:
        if not edited:
            return "An edit needs at least one changed argument."
        if unknown := sorted(set(edited) - set(pending.arg_types)):
            return f"The tool call takes no argument named {', '.join(unknown)}."
        # The tool's own argument schema (types, declared ranges): a value it would refuse keeps the token.
        if wrong := arguments.problems(edited, pending.arg_schema, pending.arg_types):
            return " ".join(f"{name}: {why}" for name, why in sorted(wrong.items()))
    return ""


# --- UNCERTAIN waits: reassign or cancel ----------------------------------------------


def reassign(
    *,
    user: User,
    handoff_id: object,
    owner: str,
    deadline_minutes: int,
    key: str,
    reason: str = "",
    now: datetime | None = None,
) -> Result:
    """Give an open wait an owner and a new deadline (a new `wait` part; the verdict follows)."""
    found = check(user, REASSIGN_WAIT, handoff_id)
    if not found.ok:
        return found
    now = now or timezone.now()
    with transaction.atomic():
        handoff = _locked_handoff(found.handoff.pk)
        if _replayed(REASSIGN_WAIT, handoff, key):
            return _noop(user, REASSIGN_WAIT, handoff, key, "This reassignment was already made; nothing changed.")
        refusal = _decided_refusal(handoff, "reassigned")
        if not refusal:
            refusal = "This wait is no longer open." if not handoff.wait_open else _owner_refusal(owner, handoff, user)
        if refusal:
            return _refuse(user, REASSIGN_WAIT, handoff, key, refusal, detail={"owner": owner[:150]})
        deadline = now + timedelta(minutes=deadline_minutes)
        wait = {**handoff.wait_part, "owner": owner, "deadline_utc": _iso(deadline), "resolved": False}
        before = handoff.verdict
        handoff = _record_wait(handoff, wait, f"reassign-{key}", now)
        _log(
            user,
            REASSIGN_WAIT.name,
            REASSIGN_WAIT,
            handoff,
            AuditEntry.Outcome.DONE,
            reason=reason,
            key=key,
            detail={"owner": owner, "deadline_utc": _iso(deadline), "verdict_before": before},
        )
    return Result(Outcome.DONE, f"The wait now belongs to {owner}, due {_iso(deadline)}.", handoff.run, handoff)


def decision_on_open_wait(handoff: Handoff) -> Decision | None:
    """The decision answering `handoff`'s open wait (its current token), if one was made; None otherwise.

    Such a wait is decided: its resume is on the way to the run (receipts.notify.outbox sends it until a worker
    applies it), so it is not decided, reassigned, cancelled or escalated again.
    """
    token = (handoff.wait_part or {}).get("resume_token_id")
    if not handoff.wait_open or not token:
        return None
    return _decision_for(handoff, token, any_handoff=True)


def _decided_refusal(handoff: Handoff, done: str) -> str:
    decision = decision_on_open_wait(handoff)
    if decision is None:
        return ""
    who = _name(decision.decided_by)
    return (
        f"This wait is already decided ({decision.kind}) by {who} at {decision.decided_at:%Y-%m-%d %H:%M:%S} UTC "
        f"and cannot be {done}; its run is waiting for a worker to apply the decision."
    )


def may_decide_as_owner(candidate: User | None, handoff: Handoff, *, by: User | None) -> bool:
    """Who may be given `handoff` to decide, by `by`: the one rule reassignment and its form's choices use.

    The candidate must be able to decide the wait once it is theirs (the decide rule itself: active, a
    viewer, decide_own_wait as its owner or decide_any_wait). Separation of duties: nobody gives a wait to
    themself, unless they hold decide-any (and could decide it anyway).
    """
    if candidate is None or not candidate.is_authenticated:
        return False
    return _may_own(candidate, handoff, by=by) and teams.sees_run(candidate, handoff.run)


def _may_own(candidate: User, handoff: Handoff, *, by: User | None) -> bool:
    theirs = copy.copy(handoff)
    theirs.wait_owner = candidate.get_username()
    if not may(candidate, DECIDE_WAIT, theirs):
        return False
    itself = by is not None and by.is_authenticated and by.pk == candidate.pk
    return not itself or candidate.has_perm(DECIDE_ANY)


def wait_owner_candidates(handoff: Handoff, *, by: User | None) -> list[AbstractBaseUser]:
    """The users `by` may give `handoff` to (may_decide_as_owner), by username."""
    deciding = Permission.objects.filter(
        content_type__app_label="receipts", codename__in=[DECIDE_OWN.split(".")[1], DECIDE_ANY.split(".")[1]]
    )
    users = get_user_model()._default_manager.filter(is_active=True)
    # A narrowing only (one query); may_decide_as_owner decides for each.
    pool = users.filter(Q(is_superuser=True) | Q(user_permissions__in=deciding) | Q(groups__permissions__in=deciding))
    # Wait owners are per team (issue 22 §2): the members of the run's team, and those who see every team.
    pool = teams.who_see(handoff.run, pool)
    ordered = pool.distinct().order_by(get_user_model().USERNAME_FIELD)
    return [candidate for candidate in ordered if _may_own(candidate, handoff, by=by)]


def _owner_refusal(owner: str, handoff: Handoff, by: User) -> str:
    manager = get_user_model()._default_manager
    candidate = manager.filter(**{get_user_model().USERNAME_FIELD: owner}, is_active=True).first()
    if candidate is None:
        return f"There is no active user named {owner!r}."
    if may_decide_as_owner(candidate, handoff, by=by):
        return ""
    if not teams.sees_run(candidate, handoff.run):  # wait owners are per team (issue 22 §2)
        return f"{owner} is not a member of this run's team; choose one of its members."
    if by.is_authenticated and candidate.pk == by.pk:
        return "You may not give this wait to yourself: someone else decides it (only an approve-any-wait holder may)."
    return (
        f"{owner} may not decide waits (that needs the {PERMISSION_LABELS[DECIDE_OWN]} or "
        f"{PERMISSION_LABELS[DECIDE_ANY]} permission); choose someone who may."
    )


def cancel(*, user: User, handoff_id: object, key: str, reason: str, now: datetime | None = None) -> Result:
    """Close an open wait without resuming the graph and mark its run failed (cancelled)."""
    found = check(user, CANCEL_WAIT, handoff_id)
    if not found.ok:
        return found
    now = now or timezone.now()
    with transaction.atomic():
        handoff = _locked_handoff(found.handoff.pk)
        if _replayed(CANCEL_WAIT, handoff, key):
            return _noop(user, CANCEL_WAIT, handoff, key, "This wait was already cancelled; nothing changed.")
        refusal = _decided_refusal(handoff, "cancelled")
        if refusal or not handoff.wait_open:
            return _refuse(user, CANCEL_WAIT, handoff, key, refusal or "This wait is no longer open.")
        cancelled = {**handoff.wait_part, "resolved": True, "resolution": "cancelled"}
        handoff = _record_wait(handoff, cancelled, f"cancel-{key}", now)
        runs.set_status(handoff.run, Run.Status.FAILED, error="Cancelled", now=now)
        _log(user, CANCEL_WAIT.name, CANCEL_WAIT, handoff, AuditEntry.Outcome.DONE, reason=reason, key=key)
    return Result(Outcome.DONE, "The wait is cancelled and its run marked failed.", handoff.run, handoff)


# --- FALSE_COMPLETE: reopen ------------------------------------------------------------


def reopen(*, user: User, handoff_id: object, key: str, reason: str) -> Result:
    """Reopen a false-complete task: audit it and run its outcome verifier again through Celery."""
    found = check(user, REOPEN_TASK, handoff_id)
    if not found.ok:
        return found
    with transaction.atomic():
        handoff = _locked_handoff(found.handoff.pk)
        if _replayed(REOPEN_TASK, handoff, key):
            return _noop(user, REOPEN_TASK, handoff, key, "This task was already reopened; nothing changed.")
        refusal = ""
        if handoff.verdict != "FALSE_COMPLETE":
            refusal = f"Only a false completion can be reopened (this handoff is {handoff.verdict})."
        elif not _has_verifier(handoff.run):
            refusal = "This run has no outcome verifier to run again."
        if refusal:
            return _refuse(user, REOPEN_TASK, handoff, key, refusal)
        entry = _log(user, REOPEN_TASK.name, REOPEN_TASK, handoff, AuditEntry.Outcome.DONE, reason=reason, key=key)
        intent = _promise(OutboxIntent.Kind.REVERIFY, handoff.run_id, handoff.run, entry)
    message = _sent_or_queued(
        intent,
        "The task is reopened; its outcome verifier runs again.",
        "The task is reopened. The re-verification is queued: it runs as soon as a worker is reachable.",
    )
    return Result(Outcome.DONE, message, handoff.run, handoff)


def _has_verifier(run: Run) -> bool:
    return runtime.current().can_reverify(run)


# --- FALSE_COMPLETE: accept as is, or mark resolved ------------------------------------------
#
# Neither makes the handoff green: its verdict stays FALSE_COMPLETE (nothing proved the outcome) and its
# run's status is left alone. The settlement is a VerdictChange row (cause task.accept or task.resolve)
# beside the audit entry that says who and why; while it is the handoff's latest verdict change, the
# handoff is no longer an open failure. Evidence that changes the verdict again supersedes it.


@dataclass(frozen=True)
class Settlement:
    how: str  # "accept" or "resolve"
    by: str
    at: datetime
    reason: str


def settle(*, user: User, handoff_id: object, how: str, key: str, reason: str) -> Result:
    """Close a false completion without a new verification: "accept" (the outcome is fine as it is) or
    "resolve" (it was put right outside Sidewisp). A reason is required; both are audited."""
    policy = {"accept": ACCEPT_TASK, "resolve": RESOLVE_TASK}[how]
    found = check(user, policy, handoff_id)
    if not found.ok:
        return found
    now = timezone.now()
    with transaction.atomic():
        handoff = _locked_handoff(found.handoff.pk)
        if _replayed(policy, handoff, key):
            return _noop(user, policy, handoff, key, "This was already done; nothing changed.")
        if (earlier := settlement(handoff)) is not None:
            done = "accepted as is" if earlier.how == "accept" else "marked resolved"
            message = f"Already {done} by {earlier.by} at {earlier.at:%Y-%m-%d %H:%M:%S} UTC; nothing changed."
            _log(user, policy.name, policy, handoff, AuditEntry.Outcome.NOOP, reason=message, key=key)
            return Result(Outcome.NOOP, message, handoff.run, handoff)
        refusal = ""
        if handoff.verdict != "FALSE_COMPLETE":
            refusal = f"Only a false completion can be accepted or resolved (this handoff is {handoff.verdict})."
        elif not reason.strip():
            refusal = "A reason is required."
        if refusal:
            return _refuse(user, policy, handoff, key, refusal)
        _log(user, policy.name, policy, handoff, AuditEntry.Outcome.DONE, reason=reason, key=key)
        note_settlement(handoff, policy.name, now)
    done = "accepted as is" if how == "accept" else "marked resolved"
    message = f"The task is {done}. Its verdict stays false complete; it no longer counts as an open failure."
    return Result(Outcome.DONE, message, handoff.run, handoff)


def settlement(handoff: Handoff) -> Settlement | None:
    """The settlement in force for `handoff`, or None (see settlements)."""
    return settlements([handoff]).get(handoff.pk)


def settlements(
    handoffs: list[Handoff], history: Mapping[int, list[VerdictChange]] | None = None
) -> dict[int, Settlement]:
    """The settlements in force by handoff pk: where the latest verdict change is an accept or resolve.

    Two queries for any number of handoffs, one when the caller has their `history` (oldest first).
    """
    pks = [h.pk for h in handoffs if h.verdict == "FALSE_COMPLETE"]
    if not pks:
        return {}
    latest: dict[int, VerdictChange] = {}
    if history is not None:
        latest = {pk: history[pk][-1] for pk in pks if history.get(pk)}
    else:
        for change in VerdictChange.objects.filter(handoff_id__in=pks).order_by("at", "pk"):
            latest[change.handoff_id] = change
    settled = {pk: c for pk, c in latest.items() if c.cause in SETTLEMENTS}
    if not settled:
        return {}
    entries = AuditEntry.objects.filter(
        handoff_id__in=settled, action__in=SETTLEMENTS, outcome=AuditEntry.Outcome.DONE
    ).order_by("at", "pk")
    said = {(e.handoff_id, e.action): e for e in entries}
    found = {}
    for pk, change in settled.items():
        entry = said.get((pk, change.cause))
        found[pk] = Settlement(
            how=change.cause.split(".")[1],
            by=entry.actor_name if entry else audit.SYSTEM,
            at=change.at,
            reason=entry.reason if entry else "",
        )
    return found


# --- STALE_CONTROL, OPEN_TOOL_PROTOCOL: stop and resume auto-continue ---------------------


def stop_auto_continue(*, user: User, run_id: object, key: str, reason: str) -> Result:
    """Stop driving the run: the worker checks before every step and parks the run."""
    found = check(user, STOP_RUN, run_id)
    if not found.ok:
        return found
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=found.run.pk)
        if not run.auto_continue:
            return _noop(user, STOP_RUN, run, key, "Auto-continue is already stopped; nothing changed.")
        if run.status in FINISHED:
            return _refuse(user, STOP_RUN, run, key, _ended(run, "stop"))
        if not run.handoffs.filter(verdict__in=STOPPABLE).exists():
            refusal = "Only a run with a stale-control or open-tool-protocol handoff can be stopped."
            return _refuse(user, STOP_RUN, run, key, refusal)
        _set_auto_continue(run, False)
        _log(user, STOP_RUN.name, STOP_RUN, run, AuditEntry.Outcome.DONE, reason=reason, key=key)
    return Result(Outcome.DONE, "Auto-continue is stopped; the worker parks the run before its next step.", run)


def resume_auto_continue(*, user: User, run_id: object, key: str, reason: str) -> Result:
    """The operator says the evidence is reconciled: drive the run again from its checkpoint."""
    found = check(user, RESUME_RUN, run_id)
    if not found.ok:
        return found
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=found.run.pk)
        if run.auto_continue:
            return _noop(user, RESUME_RUN, run, key, "Auto-continue is already on; nothing changed.")
        if run.status in FINISHED:
            return _refuse(user, RESUME_RUN, run, key, _ended(run, "continue"))
        _set_auto_continue(run, True)
        drivable = runtime.current().can_drive(run)
        # A decision that arrived while the run was stopped was kept, not applied: apply it now.
        pending = run.decisions.filter(applied_at__isnull=True).order_by("decided_at").first() if drivable else None
        work = "decision" if pending is not None else ("start" if drivable and run.status in _DRIVABLE else "none")
        entry = _log(
            user,
            RESUME_RUN.name,
            RESUME_RUN,
            run,
            AuditEntry.Outcome.DONE,
            reason=reason,
            key=key,
            detail={"enqueued": work},
        )
        intent = None
        if pending is not None:
            intent = _promise(OutboxIntent.Kind.RESUME, pending.pk, run, entry)
        elif work == "start":
            intent = _promise(OutboxIntent.Kind.START, run.pk, run, entry)
    if not drivable:
        nothing = "Auto-continue is on again; no Sidewisp worker drives this run, so nothing was enqueued."
        return Result(Outcome.DONE, f"{nothing} {runtime.current().resumer(run)}", run)
    message = _sent_or_queued(
        intent,
        "Auto-continue is on again; the run continues from its checkpoint.",
        "Auto-continue is on again. The run is queued: it continues from its checkpoint as soon as a worker is "
        "reachable.",
    )
    return Result(Outcome.DONE, message, run)


_DRIVABLE = (Run.Status.PARKED, Run.Status.QUEUED, Run.Status.RUNNING)


def _ended(run: Run, what: str) -> str:
    return f"This run has ended ({run.get_status_display().lower()}): there is nothing to {what}."


# --- parked runs and DESTINATION_NOT_STARTED: retry from the checkpoint ----------------------


def retry_refusal(run: Run) -> str:
    """Why retrying `run` from its checkpoint cannot work now, in words; "" when it can (pages offer it then)."""
    if not runtime.current().can_drive(run):
        return "No Sidewisp worker can drive this run here, so Sidewisp cannot retry it."
    if run.status not in _DRIVABLE:
        return f"{_ended(run, 'retry')[:-1]}; a worker does not start an ended run again."
    if not run.auto_continue:
        return "Auto-continue is stopped: resume it instead, which continues the run from its checkpoint."
    if run.status != Run.Status.PARKED and not run.handoffs.filter(verdict="DESTINATION_NOT_STARTED").exists():
        return "Only a parked run, or one whose destination did not start, is retried from its checkpoint."
    if run.intents.filter(kind=OutboxIntent.Kind.START, sent_at__isnull=True).exists():
        return "A start of this run is already queued; it goes out as soon as a worker is reachable."
    return ""


def retry(*, user: User, run_id: object, key: str, reason: str) -> Result:
    """Drive a parked or stuck run again from its last checkpoint: one start, promised through the outbox.

    The worker continues the interrupted step (agents.host.runner.start_run); it never starts an ended run.
    """
    found = check(user, RETRY_RUN, run_id)
    if not found.ok:
        return found
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=found.run.pk)
        if _replayed(RETRY_RUN, run, key):
            return _noop(user, RETRY_RUN, run, key, "This retry was already made; nothing changed.")
        if refusal := retry_refusal(run):
            return _refuse(user, RETRY_RUN, run, key, refusal)
        entry = _log(
            user,
            RETRY_RUN.name,
            RETRY_RUN,
            run,
            AuditEntry.Outcome.DONE,
            reason=reason,
            key=key,
            detail={"status_before": run.status},
        )
        intent = _promise(OutboxIntent.Kind.START, run.pk, run, entry)
    message = _sent_or_queued(
        intent,
        "The run is retried: a worker continues it from its last checkpoint.",
        "The retry is queued: a worker continues the run from its last checkpoint as soon as one is reachable.",
    )
    return Result(Outcome.DONE, message, run)


def _set_auto_continue(run: Run, value: bool) -> None:
    run.auto_continue = value
    run.save(update_fields=["auto_continue", "updated_at"])
    runs.announce(run)


# --- the deadline sweep (Celery beat) ------------------------------------------------------


def expire_overdue_waits(*, now: datetime | None = None) -> int:
    """Escalate or default every open wait past its deadline; returns how many were handled.

    With a backup owner (and `on_expiry: escalate`), the wait is given to the
    backup with a new deadline, once. Otherwise the safe default (reject) is
    applied as a system decision bound to the wait's token and the run resumes.
    """
    now = now or timezone.now()
    handled = 0
    due = Handoff.objects.filter(wait_open=True, wait_deadline__lte=now).select_related("run").order_by("pk")
    for candidate in due:
        escalation = runtime.current().escalation_for(candidate)
        with transaction.atomic():
            handoff = _locked_handoff(candidate.pk)
            if not handoff.wait_open or handoff.wait_deadline is None or handoff.wait_deadline > now:
                continue  # decided or reassigned meanwhile
            handled += _expire(handoff, escalation, now)
    reclassify_overdue_waits(now=now)
    return handled


def _expire(handoff: Handoff, escalation: runtime.Escalation, now: datetime) -> int:
    wait = handoff.wait_part or {}
    token = wait.get("resume_token_id") or ""
    if decision_on_open_wait(handoff) is not None:
        return 0  # decided before its deadline: that decision is on its way (the outbox sends it until applied)
    if escalation.backup_owner and handoff.wait_owner != escalation.backup_owner:
        deadline = now + timedelta(minutes=escalation.deadline_minutes)
        before = handoff.wait_owner
        new = {**wait, "owner": escalation.backup_owner, "deadline_utc": _iso(deadline), "resolved": False}
        handoff = _record_wait(handoff, new, f"escalate-{_iso(now)}", now)
        audit.log(
            actor=None,
            action="wait.escalate",
            object_type="handoff",
            object_id=handoff.pk,
            handoff=handoff,
            outcome=AuditEntry.Outcome.DONE,
            reason="deadline passed",
            detail={"from": before, "to": escalation.backup_owner, "deadline_utc": _iso(deadline)},
        )
        return 1
    if not token or _decision_for(handoff, token, any_handoff=True) is not None:
        return 0  # no token to answer with, or a decision is already on its way: nothing to apply
    if not runtime.current().can_resume(handoff.run):
        return 0  # no graph to resume: re-classification shows the wait as UNCERTAIN
    decision = Decision.objects.create(
        run=handoff.run,
        handoff=handoff,
        resume_token_id=token,
        kind=Decision.Kind.REJECT,
        message=f"Deadline passed: safe default ({escalation.safe_default}) applied.",
        decided_by=None,
        decided_at=now,
    )
    # Resolved now, as expired (spec §1 v1.1): the outcome verifier then proves the action did not happen.
    handoff = _record_wait(handoff, {**wait, "resolved": True, "resolution": "expired"}, f"expire-{_iso(now)}", now)
    reclassify(handoff, now=now)
    entry = audit.log(
        actor=None,
        action="wait.expire",
        object_type="handoff",
        object_id=handoff.pk,
        handoff=handoff,
        outcome=AuditEntry.Outcome.DONE,
        reason="deadline passed",
        detail={"decision": decision.pk, "safe_default": escalation.safe_default},
    )
    _promise(OutboxIntent.Kind.RESUME, decision.pk, handoff.run, entry)
    return 1


# --- helpers ------------------------------------------------------------------------------


def _promise(kind: str, object_id: int, run: Run, entry: AuditEntry) -> OutboxIntent:
    """The one way an action enqueues work: an outbox intent written in the action's transaction, beside its
    audit entry (which the intent's key names), and sent after commit; the beat sweep sends it again if the
    broker did not take it."""
    return outbox.promise(kind, object_id, run=run, key=f"{kind}:{object_id}:audit-{entry.pk}")


def _sent_or_queued(intent: OutboxIntent | None, sent: str, queued: str) -> str:
    # The action is done either way; the message says when the work only waits in the outbox (the broker
    # was unreachable, or the caller's transaction has not committed yet).
    return queued if intent is not None and not outbox.is_sent(intent) else sent


def _find(policy: Policy, object_id: object, user: User | None) -> Handoff | Run | None:
    # Another team's object is not found, like one that does not exist (issue 22 §2: no existence oracle).
    try:
        pk = int(str(object_id))
    except ValueError:
        return None
    if policy.object_type == "handoff":
        return teams.scope(Handoff.objects.select_related("run"), user, run="run__").filter(pk=pk).first()
    return teams.scope(Run.objects.all(), user).filter(pk=pk).first()


def _locked_handoff(pk: int) -> Handoff:
    return Handoff.objects.select_for_update().select_related("run").get(pk=pk)


def denial(user: User | None, policy: Policy, handoff: Handoff | None = None) -> str:
    """Why `user` may not perform `policy`, in words: what is missing and which roles have it."""
    if user is None or not user.is_authenticated:
        return "You are not logged in."
    if not user.has_perm(VIEW):
        return needs("Seeing the operator pages", (VIEW,))
    if policy.owner_rule:
        owner = handoff.wait_owner if handoff is not None and handoff.wait_owner else "nobody yet"
        return (
            f"{policy.doing} needs its owner ({owner}) or the {PERMISSION_LABELS[DECIDE_ANY]} permission "
            f"({_roles_with((DECIDE_ANY,))})."
        )
    return needs(policy.doing, policy.permissions)


def needs(doing: str, permissions: tuple[str, ...]) -> str:
    """ "Reopening this task needs the reopen-task permission (operator or admin)."."""
    names = " or the ".join(PERMISSION_LABELS.get(p, p.split(".")[-1].replace("_", "-")) for p in permissions)
    return f"{doing} needs the {names} permission ({_roles_with(permissions)})."


def _roles_with(permissions: tuple[str, ...]) -> str:
    codenames = {p.split(".")[-1] for p in permissions}
    holders = [role for role, granted in ROLES.items() if codenames & set(granted)]
    return "held by " + (" or ".join(holders) if holders else "no role")


AUDIT_DENIAL = needs("Reading the audit log", AUDIT_READERS)


def _replayed(policy: Policy, obj: Handoff | Run, key: str) -> bool:
    return AuditEntry.objects.filter(
        action=policy.name, object_type=policy.object_type, object_id=str(obj.pk), outcome="done", detail__key=key
    ).exists()


def _noop(user: User, policy: Policy, obj: Handoff | Run, key: str, message: str) -> Result:
    earlier = (
        AuditEntry.objects.filter(action=policy.name, object_type=policy.object_type, object_id=str(obj.pk))
        .filter(outcome="done")
        .order_by("-at", "-pk")
        .first()
    )
    if earlier is not None:
        message = f"{message} (done by {earlier.actor_name} at {earlier.at:%Y-%m-%d %H:%M:%S} UTC)"
    _log(user, policy.name, policy, obj, AuditEntry.Outcome.NOOP, reason=message, key=key)
    handoff = obj if isinstance(obj, Handoff) else None
    return Result(Outcome.NOOP, message, obj if isinstance(obj, Run) else obj.run, handoff)


def _refuse(
    user: User,
    policy: Policy,
    obj: Handoff | Run,
    key: str,
    refusal: str,
    *,
    action: str = "",
    detail: dict | None = None,
) -> Result:
    """Allowed, but the object's state does not permit it: audit and say why."""
    _log(user, action or policy.name, policy, obj, AuditEntry.Outcome.REFUSED, reason=refusal, key=key, detail=detail)
    handoff = obj if isinstance(obj, Handoff) else None
    return Result(Outcome.REFUSED, refusal, obj if isinstance(obj, Run) else obj.run, handoff)


def _log(
    user: User | None,
    action: str,
    policy: Policy,
    obj: Handoff | Run,
    outcome: str,
    *,
    reason: str = "",
    key: str = "",
    detail: dict | None = None,
) -> AuditEntry:
    handoff = obj if isinstance(obj, Handoff) else None
    run = obj if isinstance(obj, Run) else None
    details = {**(detail or {}), **({"key": key} if key else {})}
    return audit.log(
        actor=user,
        action=action,
        object_type=policy.object_type,
        object_id=obj.pk,
        outcome=outcome,
        reason=reason,
        run=run,
        handoff=handoff,
        detail=details,
    )


def _record_wait(handoff: Handoff, wait: dict, attempt: str, now: datetime) -> Handoff:
    return record(
        handoff_id=handoff.handoff_id,
        operation_id=handoff.run.operation_id,
        part="wait",
        value=wait,
        attempt=attempt[:200],
        now=now,
    ).handoff


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _name(user: AbstractBaseUser | None) -> str:
    return user.get_username() if user is not None else audit.SYSTEM


# --- start a hosted run -------------------------------------------------------------------

# The audit detail names at most this many of the input's top-level keys (names only, never values).
MAX_AUDITED_INPUT_KEYS = 50


def check_start(user: User | None) -> Result:
    """May `user` start runs? A denial is audited (there is no object yet: the id is "new")."""
    if may(user, START_RUN):
        return Result(Outcome.DONE, "")
    why = denial(user, START_RUN)
    audit.log(
        actor=user,
        action=START_RUN.name,
        object_type="run",
        object_id="new",
        outcome=AuditEntry.Outcome.DENIED,
        reason=why,
    )
    return Result(Outcome.DENIED, why)


def start_run(
    *, user: User, graph: str, graph_input: Mapping, key: str, operation_id: str = "", reason: str = ""
) -> Result:
    """Queue a hosted run of the registered `graph` and enqueue its start after commit.

    The audit entry names the graph and the input's top-level keys, never the
    input's values (they hold the user's prompt). A repeated key is a no-op that
    names the run it started; an operation id in use is refused.
    """
    found = check_start(user)
    if not found.ok:
        return found
    agent_runtime = runtime.current()
    # Without a given id, the key names the operation: a racing second submission of the same form
    # hits the unique operation id instead of starting a second run.
    operation_id = operation_id or f"op-{key[:16]}"
    with transaction.atomic():
        if (earlier := _started_with(key)) is not None:
            return _noop(user, START_RUN, earlier.run, key, "This run was already started; nothing changed.")
        # Another team's graph is refused in the same words as an unknown one (issue 22 §2: no oracle).
        known = graph in agent_runtime.graphs() and teams.graphs_usable(user, [graph])
        refusal = "" if known else f"There is no registered graph named {graph!r}."
        if not refusal and (problem := storable.json_problem(graph_input)) is not None:
            refusal = f"The input cannot be stored: it {problem.what}."  # where is the input's text: not audited
        run = None
        if not refusal:
            try:
                with transaction.atomic():
                    run = runs.create_hosted(graph, dict(graph_input), operation_id=operation_id)
            except bundle.BundleError as exc:
                refusal = f"The operation id is not valid: it {exc.message}."
            except DataError as exc:
                # Whatever else the database refuses in the input: its class, never its message (which quotes it).
                refusal = f"The database refused the input ({type(exc).__name__}); nothing was started."
            except (ValueError, IntegrityError):
                if (earlier := _started_with(key)) is not None:
                    return _noop(user, START_RUN, earlier.run, key, "This run was already started; nothing changed.")
                refusal = f"A run with operation id {operation_id!r} exists already; choose another or leave it empty."
        if run is None:
            audit.log(
                actor=user,
                action=START_RUN.name,
                object_type="run",
                object_id="new",
                outcome=AuditEntry.Outcome.REFUSED,
                reason=refusal,
                detail={"graph": graph[:100], "key": key},
            )
            return Result(Outcome.REFUSED, refusal)
        input_keys = sorted(str(name)[:100] for name in graph_input)[:MAX_AUDITED_INPUT_KEYS]
        detail = {"graph": graph, "input_keys": input_keys}
        entry = _log(
            user, START_RUN.name, START_RUN, run, AuditEntry.Outcome.DONE, reason=reason, key=key, detail=detail
        )
        intent = _promise(OutboxIntent.Kind.START, run.pk, run, entry)
    message = _sent_or_queued(
        intent,
        f"Run {run.operation_id} is queued: a worker starts graph {graph}.",
        f"Run {run.operation_id} is queued: a worker starts graph {graph} as soon as one is reachable.",
    )
    return Result(Outcome.DONE, message, run)


def _started_with(key: str) -> AuditEntry | None:
    done = AuditEntry.objects.filter(action=START_RUN.name, outcome=AuditEntry.Outcome.DONE, detail__key=key)
    return done.select_related("run").order_by("pk").first()
