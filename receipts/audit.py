"""Writing the append-only audit log (the only way entries are made)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from receipts.models import AuditEntry, Handoff, Run

SYSTEM = "system"


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
