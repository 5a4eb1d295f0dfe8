"""Single sign-on settings, read from the environment at start-up (README "Single sign-on").

Plain Python, no Django import beyond ImproperlyConfigured: settings.py calls `from_environment()`,
and a bad value stops the process with a message naming the variable (never echoing the secret).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from sidewisp.ops.env import env_float, env_int, env_str

# The four role groups of receipts/roles.py (a test keeps the two lists equal: settings cannot import models).
ROLE_NAMES = ("viewer", "operator", "approver", "admin")
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
SIGN_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "HS256")
TEAM_SLUG = re.compile(r"^[a-z0-9][a-z0-9_-]{0,49}$")
REQUIRED_WITH_ISSUER = ("SIDEWISP_OIDC_CLIENT_ID", "SIDEWISP_OIDC_CLIENT_SECRET", "SIDEWISP_OIDC_GROUP_MAP")


@dataclass(frozen=True)
class Grant:
    """What one identity-provider group gives: Sidewisp roles and team slugs."""

    roles: frozenset[str] = frozenset()
    teams: frozenset[str] = frozenset()

    def __or__(self, other: Grant) -> Grant:
        return Grant(self.roles | other.roles, self.teams | other.teams)


@dataclass(frozen=True)
class GroupMap:
    """Identity-provider group name → Grant. Groups it does not name give nothing (default deny)."""

    grants: Mapping[str, Grant]

    def resolve(self, groups: Iterable[str]) -> Grant:
        granted = Grant()
        for group in groups:
            granted = granted | self.grants.get(group, Grant())
        return granted


@dataclass(frozen=True)
class SsoConfig:
    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    group_map: GroupMap
    scopes: str = "openid email profile"
    groups_claim: str = "groups"
    username_claim: str = "preferred_username"
    name: str = "single sign-on"
    sign_algorithm: str = "RS256"
    timeout: float = 10.0
    # A session signed in through the provider ends after this long: the next sign-in re-reads the groups.
    session_hours: int = 12

    def library_options(self) -> dict[str, object]:
        """The mozilla-django-oidc settings its views and backend read, taken from this configuration."""
        return {
            "OIDC_RP_CLIENT_ID": self.client_id,
            "OIDC_RP_CLIENT_SECRET": self.client_secret,
            "OIDC_RP_SCOPES": self.scopes,
            "OIDC_RP_SIGN_ALGO": self.sign_algorithm,
            "OIDC_RP_IDP_SIGN_KEY": None,
            "OIDC_USE_NONCE": True,
            "OIDC_USE_PKCE": True,
            "OIDC_VERIFY_SSL": True,
            "OIDC_TIMEOUT": self.timeout,
            "OIDC_PROXY": None,
            "OIDC_AUTHENTICATION_CALLBACK_URL": "sso-callback",
            "OIDC_REDIRECT_FIELD_NAME": "next",
            "OIDC_STATE_SIZE": 32,
            "OIDC_NONCE_SIZE": 32,
            "OIDC_AUTH_REQUEST_EXTRA_PARAMS": {},
            "OIDC_STORE_ACCESS_TOKEN": False,
            "OIDC_STORE_ID_TOKEN": False,
            "OIDC_ALLOW_UNSECURED_JWT": False,
        }


def from_environment() -> SsoConfig | None:
    """The configuration from SIDEWISP_OIDC_* variables; None (single sign-on off) when none is set."""
    issuer = env_str("SIDEWISP_OIDC_ISSUER", "").strip()
    if not issuer:
        for name in REQUIRED_WITH_ISSUER:
            if env_str(name, "").strip():
                msg = f"SIDEWISP_OIDC_ISSUER must be set when {name} is (single sign-on needs its identity provider)"
                raise ImproperlyConfigured(msg)
        return None
    for name in REQUIRED_WITH_ISSUER:
        if not env_str(name, "").strip():
            msg = f"{name} must be set when SIDEWISP_OIDC_ISSUER is"
            raise ImproperlyConfigured(msg)
    return SsoConfig(
        issuer=parse_issuer("SIDEWISP_OIDC_ISSUER", issuer),
        client_id=env_str("SIDEWISP_OIDC_CLIENT_ID", "").strip(),
        client_secret=env_str("SIDEWISP_OIDC_CLIENT_SECRET", "").strip(),
        group_map=parse_group_map("SIDEWISP_OIDC_GROUP_MAP", env_str("SIDEWISP_OIDC_GROUP_MAP", "")),
        scopes=parse_scopes("SIDEWISP_OIDC_SCOPES", env_str("SIDEWISP_OIDC_SCOPES", "openid email profile")),
        groups_claim=_claim_name("SIDEWISP_OIDC_GROUPS_CLAIM", env_str("SIDEWISP_OIDC_GROUPS_CLAIM", "groups")),
        username_claim=_claim_name(
            "SIDEWISP_OIDC_USERNAME_CLAIM", env_str("SIDEWISP_OIDC_USERNAME_CLAIM", "preferred_username")
        ),
        name=env_str("SIDEWISP_OIDC_NAME", "single sign-on").strip()[:60] or "single sign-on",
        sign_algorithm=_algorithm("SIDEWISP_OIDC_SIGN_ALGORITHM", env_str("SIDEWISP_OIDC_SIGN_ALGORITHM", "RS256")),
        timeout=env_float("SIDEWISP_OIDC_TIMEOUT", 10.0, minimum=0.1),
        session_hours=env_int("SIDEWISP_OIDC_SESSION_HOURS", 12, minimum=1),
    )


def parse_issuer(name: str, raw: str) -> str:
    """An https URL (http only on a loopback host), without query, fragment or credentials; kept exactly."""
    parts = urlsplit(raw)
    secure = parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS)
    if not secure or not parts.hostname or parts.query or parts.fragment or parts.username or parts.password:
        msg = (
            f"{name} must be the identity provider's https:// issuer URL (http:// only on 127.0.0.1, localhost "
            f"or [::1]), without query, fragment or user:password@, e.g. https://login.example.com/realms/ops"
        )
        raise ImproperlyConfigured(msg)
    return raw


def public_url(url: object) -> bool:
    """The same rule for the endpoints a discovery document names."""
    if not isinstance(url, str):
        return False
    parts = urlsplit(url)
    return bool(parts.hostname) and (
        parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS)
    )


def parse_scopes(name: str, raw: str) -> str:
    scopes = raw.split()
    if "openid" not in scopes or not all(re.fullmatch(r"[\x21\x23-\x5b\x5d-\x7e]+", scope) for scope in scopes):
        msg = f"{name} must be space-separated scopes including openid (got {raw!r})"
        raise ImproperlyConfigured(msg)
    return " ".join(scopes)


def parse_group_map(name: str, raw: str) -> GroupMap:
    """`{"idp-group": ROLE | [ROLE, ...] | {"roles": [...], "teams": [...]}}`, every name checked."""
    try:
        document = json.loads(raw)
    except ValueError:
        msg = f'{name} must be a JSON object such as {{"sidewisp-operators": "operator"}} (it is not JSON)'
        raise ImproperlyConfigured(msg) from None
    if not isinstance(document, dict) or not document:
        msg = f'{name} must be a non-empty JSON object of group → role, e.g. {{"sidewisp-operators": "operator"}}'
        raise ImproperlyConfigured(msg)
    grants = {}
    for group, value in document.items():
        if not group.strip() or len(group) > 200:
            msg = f"{name} has an empty or over-long group name (at most 200 characters)"
            raise ImproperlyConfigured(msg)
        grants[group] = _grant(name, group, value)
    return GroupMap(MappingProxyType(grants))


def _grant(name: str, group: str, value: object) -> Grant:
    if isinstance(value, str | list):
        value = {"roles": value}
    if not isinstance(value, dict) or not value or set(value) - {"roles", "teams"}:
        msg = f'{name}: group "{group}" must map to a role, a list of roles or {{"roles": [...], "teams": [...]}}'
        raise ImproperlyConfigured(msg)
    roles = _names(name, group, "roles", value.get("roles", []))
    teams = _names(name, group, "teams", value.get("teams", []))
    if unknown := sorted(roles - set(ROLE_NAMES)):
        msg = f'{name}: group "{group}" maps to unknown role "{unknown[0]}" (roles: {", ".join(ROLE_NAMES)})'
        raise ImproperlyConfigured(msg)
    if bad := sorted(team for team in teams if not TEAM_SLUG.match(team)):
        msg = f'{name}: group "{group}" maps to team "{bad[0]}", which is not a team slug (a-z, 0-9, - and _)'
        raise ImproperlyConfigured(msg)
    return Grant(frozenset(roles), frozenset(teams))


def _names(name: str, group: str, key: str, value: object) -> set[str]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(item, str) for item in values):
        msg = f'{name}: group "{group}" {key} must be a name or a list of names'
        raise ImproperlyConfigured(msg)
    return set(values)


def _claim_name(name: str, raw: str) -> str:
    value = raw.strip()
    if not re.fullmatch(r"[A-Za-z0-9_.:/-]{1,100}", value):
        msg = f"{name} must be a claim name such as groups (letters, digits, _ . : / -; got {raw!r})"
        raise ImproperlyConfigured(msg)
    return value


def _algorithm(name: str, raw: str) -> str:
    value = raw.strip()
    if value not in SIGN_ALGORITHMS:
        msg = f"{name} must be one of {', '.join(SIGN_ALGORITHMS)} (got {raw!r})"
        raise ImproperlyConfigured(msg)
    return value
