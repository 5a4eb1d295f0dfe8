"""Who may perform which operator action, and how an attempt that does not go through is answered and audited.

The permissions and the policies (spec §5) are here, with the one check every action makes first
(`check`: find the object, check the permission and the object-level rule, audit a denial), the words
of a denial, and the audit entries of a refusal, a no-op and a done action.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from receipts.models import AuditEntry, Decision, Handoff, Run
from receipts.org import audit, teams
from receipts.org.roles import ROLES

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
VERIFY_TASK = Policy("task.verify", (REOPEN,), "handoff", reason_required=True, doing="Verifying this task again")
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
    VERIFY_TASK,
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
        log_attempt(user, action, policy, obj, AuditEntry.Outcome.DENIED, reason=found.message)
    return found


# --- finding the object ------------------------------------------------------------


def _find(policy: Policy, object_id: object, user: User | None) -> Handoff | Run | None:
    # Another team's object is not found, like one that does not exist (issue 22 §2: no existence oracle).
    try:
        pk = int(str(object_id))
    except ValueError:
        return None
    if policy.object_type == "handoff":
        return teams.scope(Handoff.objects.select_related("run"), user, run="run__").filter(pk=pk).first()
    return teams.scope(Run.objects.all(), user).filter(pk=pk).first()


# --- denials in words ---------------------------------------------------------------


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


# --- audit entries of an attempt --------------------------------------------------------


def replayed(policy: Policy, obj: Handoff | Run, key: str) -> bool:
    return AuditEntry.objects.filter(
        action=policy.name, object_type=policy.object_type, object_id=str(obj.pk), outcome="done", detail__key=key
    ).exists()


def noop(user: User, policy: Policy, obj: Handoff | Run, key: str, message: str) -> Result:
    earlier = (
        AuditEntry.objects.filter(action=policy.name, object_type=policy.object_type, object_id=str(obj.pk))
        .filter(outcome="done")
        .order_by("-at", "-pk")
        .first()
    )
    if earlier is not None:
        message = f"{message} (done by {earlier.actor_name} at {earlier.at:%Y-%m-%d %H:%M:%S} UTC)"
    log_attempt(user, policy.name, policy, obj, AuditEntry.Outcome.NOOP, reason=message, key=key)
    handoff = obj if isinstance(obj, Handoff) else None
    return Result(Outcome.NOOP, message, obj if isinstance(obj, Run) else obj.run, handoff)


def refuse(
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
    log_attempt(
        user, action or policy.name, policy, obj, AuditEntry.Outcome.REFUSED, reason=refusal, key=key, detail=detail
    )
    handoff = obj if isinstance(obj, Handoff) else None
    return Result(Outcome.REFUSED, refusal, obj if isinstance(obj, Run) else obj.run, handoff)


def log_attempt(
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
