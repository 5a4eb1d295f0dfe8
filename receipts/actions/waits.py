"""Operator actions on a wait: approve, reject or edit it (bound to its resume token), reassign it, cancel it."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Permission
from django.db import IntegrityError, transaction
from django.utils import timezone

from receipts.actions import arguments
from receipts.actions.policy import (
    CANCEL_WAIT,
    DECIDE_ANY,
    DECIDE_OWN,
    DECIDE_WAIT,
    DECISION_KINDS,
    PERMISSION_LABELS,
    REASSIGN_WAIT,
    Outcome,
    Result,
    User,
    check,
    log_attempt,
    may,
    noop,
    refuse,
    replayed,
)
from receipts.actions.steps import actor_name, iso, locked_handoff, promise, record_wait, sent_or_queued
from receipts.ingest import runs
from receipts.models import AuditEntry, Decision, Handoff, OutboxIntent, Run
from receipts.org import teams
from receipts.workers import runtime

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
    expected: Mapping[str, str] | None = None,
) -> Result:
    """Answer an open wait with a decision bound to its resume token, then resume the graph after commit.

    The token is single use (one Decision per run and token): a replay, a second
    tab or a racing approver gets a no-op that names who decided and when. `expected` is the wait's owner and
    deadline as the approver's page showed them (a batch decision, issue 30 §7): a wait changed since is refused.
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
        if (earlier := decision_for(handoff, token)) is not None:
            return _already_decided(user, action, handoff, earlier, key)
        if not may(user, DECIDE_WAIT, handoff):
            # Checked again under the row lock: a reassignment that committed first took the wait away.
            refusal = f"This wait was reassigned to {handoff.wait_owner or 'nobody'} meanwhile; nothing changed."
            return refuse(user, DECIDE_WAIT, handoff, key, refusal, action=action)
        if refusal := _changed_since(handoff, expected) or _decision_refusal(
            handoff, kind, token, reason, edited_args, now
        ):
            return refuse(user, DECIDE_WAIT, handoff, key, refusal, action=action)
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
            return _already_decided(user, action, handoff, decision_for(handoff, token, any_handoff=True), key)
        entry = log_attempt(
            user,
            action,
            DECIDE_WAIT,
            handoff,
            AuditEntry.Outcome.DONE,
            reason=reason,
            key=key,
            detail={"decision": decision.pk, "edited_keys": sorted(edited_args or {}) if kind == "edit" else []},
        )
        intent = promise(OutboxIntent.Kind.RESUME, decision.pk, handoff.run, entry)
    verb = {"approve": "approved", "reject": "rejected", "edit": "approved with edited arguments"}[kind]
    message = sent_or_queued(
        intent,
        f"Wait {verb}; the run resumes from its checkpoint.",
        f"Wait {verb}. The resume is queued: the run resumes from its checkpoint as soon as a worker is reachable.",
    )
    return Result(Outcome.DONE, message, handoff.run, handoff, decision)


def _changed_since(handoff: Handoff, expected: Mapping[str, str] | None) -> str:
    """Why the wait is not the one the approver saw (reassigned, given a new deadline, closed); "" when it is."""
    if expected is None:
        return ""
    if not handoff.wait_open:
        return "This wait was closed meanwhile (decided, expired or cancelled); nothing changed."
    if (handoff.wait_owner or "") != expected.get("owner", ""):
        return f"This wait was reassigned to {handoff.wait_owner or 'nobody'} meanwhile; nothing changed."
    deadline = iso(handoff.wait_deadline) if handoff.wait_deadline else ""
    if deadline != expected.get("deadline", ""):
        return f"This wait's deadline was changed meanwhile (now {deadline or 'none'}); nothing changed."
    return ""


def decision_for(handoff: Handoff, token: str, *, any_handoff: bool = False) -> Decision | None:
    found = Decision.objects.select_related("decided_by").filter(run=handoff.run, resume_token_id=token)
    return (found if any_handoff else found.filter(handoff=handoff)).first()


def _already_decided(user: User, action: str, handoff: Handoff, earlier: Decision | None, key: str) -> Result:
    who = actor_name(earlier.decided_by) if earlier else "someone"
    when = f"{earlier.decided_at:%Y-%m-%d %H:%M:%S} UTC" if earlier else "earlier"
    kind = earlier.kind if earlier else "decided"
    message = f"Already decided ({kind}) by {who} at {when}; nothing changed."
    log_attempt(
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
        handoff = locked_handoff(found.handoff.pk)
        if replayed(REASSIGN_WAIT, handoff, key):
            return noop(user, REASSIGN_WAIT, handoff, key, "This reassignment was already made; nothing changed.")
        refusal = _decided_refusal(handoff, "reassigned")
        if not refusal:
            refusal = "This wait is no longer open." if not handoff.wait_open else _owner_refusal(owner, handoff, user)
        if refusal:
            return refuse(user, REASSIGN_WAIT, handoff, key, refusal, detail={"owner": owner[:150]})
        deadline = now + timedelta(minutes=deadline_minutes)
        wait = {**handoff.wait_part, "owner": owner, "deadline_utc": iso(deadline), "resolved": False}
        before = handoff.verdict
        handoff = record_wait(handoff, wait, f"reassign-{key}", now)
        log_attempt(
            user,
            REASSIGN_WAIT.name,
            REASSIGN_WAIT,
            handoff,
            AuditEntry.Outcome.DONE,
            reason=reason,
            key=key,
            detail={"owner": owner, "deadline_utc": iso(deadline), "verdict_before": before},
        )
    return Result(Outcome.DONE, f"The wait now belongs to {owner}, due {iso(deadline)}.", handoff.run, handoff)


def decision_on_open_wait(handoff: Handoff) -> Decision | None:
    """The decision answering `handoff`'s open wait (its current token), if one was made; None otherwise.

    Such a wait is decided: its resume is on the way to the run (receipts.notify.outbox sends it until a worker
    applies it), so it is not decided, reassigned, cancelled or escalated again.
    """
    token = (handoff.wait_part or {}).get("resume_token_id")
    if not handoff.wait_open or not token:
        return None
    return decision_for(handoff, token, any_handoff=True)


def _decided_refusal(handoff: Handoff, done: str) -> str:
    decision = decision_on_open_wait(handoff)
    if decision is None:
        return ""
    who = actor_name(decision.decided_by)
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
    pool = users.filter(teams.holding_q(users.model, deciding))
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
        handoff = locked_handoff(found.handoff.pk)
        if replayed(CANCEL_WAIT, handoff, key):
            return noop(user, CANCEL_WAIT, handoff, key, "This wait was already cancelled; nothing changed.")
        refusal = _decided_refusal(handoff, "cancelled")
        if refusal or not handoff.wait_open:
            return refuse(user, CANCEL_WAIT, handoff, key, refusal or "This wait is no longer open.")
        cancelled = {**handoff.wait_part, "resolved": True, "resolution": "cancelled"}
        handoff = record_wait(handoff, cancelled, f"cancel-{key}", now)
        runs.set_status(handoff.run, Run.Status.FAILED, error="Cancelled", now=now)
        log_attempt(user, CANCEL_WAIT.name, CANCEL_WAIT, handoff, AuditEntry.Outcome.DONE, reason=reason, key=key)
    return Result(Outcome.DONE, "The wait is cancelled and its run marked failed.", handoff.run, handoff)
