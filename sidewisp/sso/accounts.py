"""The account behind a verified sign-in: found by (issuer, subject), its roles set from the groups claim.

All in one transaction: a sign-in that is refused leaves no account, identity or role change behind,
except that a known person whose groups no longer give any role loses their roles (that is the point).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from receipts.models import AuditEntry, Membership
from receipts.org import audit, teams
from receipts.org.identities import SsoIdentity
from sidewisp.sso.config import ROLE_NAMES, Grant, SsoConfig
from sidewisp.sso.outcomes import NoRole, SignInRefused

ROLES_CHANGED = "sso.roles_changed"
MAX_GROUPS = 500


def sign_in(config: SsoConfig, claims: dict) -> AbstractBaseUser:
    """The user these verified claims name, with the roles their groups give; NoRole when they give none."""
    groups = groups_of(config, claims)
    granted = config.group_map.resolve(groups)
    try:
        user = _sign_in(config, claims, granted, groups)
    except IntegrityError:  # a first sign-in of the same person, or of the same user name, at the same moment
        raise SignInRefused("busy") from None
    if not granted.roles:
        raise NoRole(user.get_username(), groups)
    return user


def _sign_in(config: SsoConfig, claims: dict, granted: Grant, groups: list[str]) -> AbstractBaseUser:
    with transaction.atomic():
        identity = (
            SsoIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=config.issuer, subject=claims["sub"])
            .first()
        )
        if identity is None and not granted.roles:
            raise NoRole(_username(config, claims), groups)
        user = identity.user if identity is not None else _create(config, claims)
        if not user.is_active:
            raise SignInRefused("inactive", username=user.get_username())
        _follow_claims(user, claims, granted)
    return user


def groups_of(config: SsoConfig, claims: dict) -> list[str]:
    """The groups claim as a list of names (a single name counts as one group; absent is none)."""
    value = claims.get(config.groups_claim, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or len(value) > MAX_GROUPS or not all(isinstance(g, str) for g in value):
        raise SignInRefused("groups", claim=config.groups_claim)
    return value


def _create(config: SsoConfig, claims: dict) -> AbstractBaseUser:
    username = _username(config, claims)
    users = get_user_model().objects
    if users.filter(username__iexact=username).exists():
        raise SignInRefused("username_taken", username=username)
    user = users.create_user(username, email=_text(claims, "email", 254))
    user.set_unusable_password()
    user.save(update_fields=["password"])
    SsoIdentity.objects.create(user=user, issuer=config.issuer, subject=claims["sub"])
    return user


def _username(config: SsoConfig, claims: dict) -> str:
    username = claims.get(config.username_claim)
    try:
        if not isinstance(username, str) or not 0 < len(username) <= 150:
            raise ValidationError("length")
        UnicodeUsernameValidator()(username)
    except ValidationError:
        raise SignInRefused("username", claim=config.username_claim) from None
    return username


def _follow_claims(user: AbstractBaseUser, claims: dict, granted: Grant) -> None:
    """Role groups and claimed teams exactly as granted (other groups and local teams untouched), the profile
    as the provider says; one audit entry when a role or a team changed."""
    added, removed = _set_roles(user, granted.roles)
    teams_before = _claimed_teams(user)
    teams.set_claimed_teams(user, granted.teams)
    teams_after = _claimed_teams(user)
    # An SSO account's powers come from the identity provider alone: no superuser flag given locally.
    user.is_staff, user.is_superuser = "admin" in granted.roles, False
    user.email = _text(claims, "email", 254)
    user.first_name = _text(claims, "given_name", 150)
    user.last_name = _text(claims, "family_name", 150)
    user.save(update_fields=["is_staff", "is_superuser", "email", "first_name", "last_name"])
    change = {
        "added": added,
        "removed": removed,
        "teams_added": sorted(teams_after - teams_before),
        "teams_removed": sorted(teams_before - teams_after),
    }
    if any(change.values()):
        audit.log(
            actor=None,
            action=ROLES_CHANGED,
            object_type="account",
            object_id=user.get_username(),
            outcome=AuditEntry.Outcome.DONE,
            reason="roles and teams follow the identity provider's groups at sign-in",
            detail=change,
        )


def _set_roles(user: AbstractBaseUser, roles: frozenset[str]) -> tuple[list[str], list[str]]:
    held = set(user.groups.filter(name__in=ROLE_NAMES).values_list("name", flat=True))
    added, removed = sorted(roles - held), sorted(held - roles)
    if removed:
        user.groups.remove(*Group.objects.filter(name__in=removed))
    if added:
        found = list(Group.objects.filter(name__in=added))
        if len(found) != len(added):
            msg = "the role groups are not all installed (run migrate)"
            raise LookupError(msg)
        user.groups.add(*found)
    return added, removed


def _claimed_teams(user: AbstractBaseUser) -> set[str]:
    claimed = Membership.objects.filter(user=user, origin=Membership.Origin.CLAIM)
    return set(claimed.values_list("team__slug", flat=True))


def _text(claims: dict, name: str, limit: int) -> str:
    value = claims.get(name)
    return value[:limit] if isinstance(value, str) else ""
