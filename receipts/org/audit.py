"""Writing the append-only audit log (the only way entries are made)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from receipts.models import AuditEntry, Handoff, Run
from receipts.verdicts.bundle import text_problem

SYSTEM = "system"
LOGIN_LOCKED_OUT = "login.locked_out"


def log(
    *,
    actor: AbstractBaseUser | AnonymousUser | None,
    action: str,
    object_type: str,
    object_id: str | int,
    outcome: str,
    reason: str = "",
    run: Run | None = None,
    handoff: Handoff | None = None,
    detail: dict | None = None,
) -> AuditEntry:
    """Append one entry. `actor=None` is a system decision; an anonymous user is recorded as such."""
    user = actor if actor is not None and actor.is_authenticated else None
    if actor is None:
        name = SYSTEM
    elif user is None:
        name = "anonymous"
    else:
        name = user.get_username()
    return AuditEntry.objects.create(
        actor=user,
        actor_name=name,
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        run=run or (handoff.run if handoff else None),
        handoff=handoff,
        verdict=handoff.verdict if handoff else "",
        reason=reason[:500],
        outcome=outcome,
        detail=detail or {},
    )


def log_lockout(username: object, *, failure_limit: int, cooloff_minutes: int) -> AuditEntry:
    """A system entry: logging in was paused after `failure_limit` failed attempts.

    The attempted username is kept only when it names an account and passes the
    minimization rule; any other text (a password typed into the username field,
    a 5,000-character probe) becomes `account: unknown` and is not stored. No
    password and no address are recorded (the login throttle keeps the address
    until the cool-off ends, the audit log never).
    """
    name = username[:150] if isinstance(username, str) else ""
    known = bool(name) and text_problem(name) is None and get_user_model().objects.filter(username=name).exists()
    return log(
        actor=None,
        action=LOGIN_LOCKED_OUT,
        object_type="account",
        object_id=name if known else "",
        outcome=AuditEntry.Outcome.DENIED,
        reason=f"{failure_limit} failed log-ins: logging in paused for {cooloff_minutes} minutes",
        detail={"account": "known" if known else "unknown", "cooloff_minutes": cooloff_minutes},
    )
