"""The identity provider's endpoints, read from its discovery document (OpenID Connect Discovery 1.0).

Fetched at the first sign-in, not at start-up (a provider that is down must not stop Sidewisp), and kept
for an hour. The document must name the configured issuer exactly, as the specification requires.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import requests

from sidewisp.sso.config import SsoConfig, public_url
from sidewisp.sso.outcomes import SignInRefused

KEEP_SECONDS = 3600.0
_lock = threading.Lock()
_found: dict[tuple[str, str], tuple[float, Provider]] = {}


@dataclass(frozen=True)
class Provider:
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str
    token_auth_basic: bool


def provider(config: SsoConfig) -> Provider:
    """The endpoints of the configured issuer; SignInRefused("unreachable" / "discovery") when unusable."""
    key = (config.issuer, config.sign_algorithm)
    with _lock:
        hit = _found.get(key)
    if hit is not None and time.monotonic() - hit[0] < KEEP_SECONDS:
        return hit[1]
    found = _fetch(config)
    with _lock:
        _found[key] = (time.monotonic(), found)
    return found


def forget() -> None:
    """Drop what was read (tests start providers on new ports)."""
    with _lock:
        _found.clear()


def _fetch(config: SsoConfig) -> Provider:
    url = config.issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        response = requests.get(url, timeout=config.timeout, allow_redirects=False)
        response.raise_for_status()
        document = response.json()
    except requests.RequestException:
        raise SignInRefused("unreachable") from None
    except ValueError:
        raise SignInRefused("discovery", problem="its discovery document is not JSON") from None
    return _provider(config, document)


def _provider(config: SsoConfig, document: object) -> Provider:
    if not isinstance(document, dict):
        raise SignInRefused("discovery", problem="its discovery document is not a JSON object")
    if document.get("issuer") != config.issuer:
        raise SignInRefused("discovery", problem="its discovery document names another issuer")
    needed = ["authorization_endpoint", "token_endpoint"]
    if not config.sign_algorithm.startswith("HS"):
        needed.append("jwks_uri")
    for name in needed:
        if not public_url(document.get(name)):
            raise SignInRefused("discovery", problem=f"its discovery document has no usable {name}")
    userinfo = document.get("userinfo_endpoint", "")
    methods = document.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    return Provider(
        authorization_endpoint=document["authorization_endpoint"],
        token_endpoint=document["token_endpoint"],
        jwks_uri=document.get("jwks_uri", ""),
        userinfo_endpoint=userinfo if public_url(userinfo) else "",
        token_auth_basic="client_secret_basic" in methods or "client_secret_post" not in methods,
    )
