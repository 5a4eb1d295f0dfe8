"""Forwarded headers are believed only from the proxies the operator names (SIDEWISP_TRUSTED_PROXIES).

Anyone can send `X-Forwarded-For` and `X-Forwarded-Proto`. Believed from everyone, a spoofed
`X-Forwarded-Proto: https` would make a plain-HTTP request count as secure, and a made-up
`X-Forwarded-For` would give every login attempt a fresh address for the login throttle and pass
`/metrics`' address list. So the ASGI scope's client address and scheme (which become Django's
`REMOTE_ADDR` and `request.is_secure()`, and the WebSocket origin check's scheme) are taken from those
headers only when the connection itself comes from a trusted proxy, and otherwise left as the socket
says. No Django setting trusts a header by itself (`SECURE_PROXY_SSL_HEADER` is off).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_SCHEMES = {"http": {"http": "http", "https": "https"}, "websocket": {"http": "ws", "https": "wss"}}


class TrustedProxyHeaders:
    """ASGI wrapper: rewrite the scope's client and scheme from a trusted proxy's forwarded headers."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] in _SCHEMES and settings.SIDEWISP_TRUSTED_PROXIES:
            scope = forwarded_scope(scope, settings.SIDEWISP_TRUSTED_PROXIES)
        return await self.app(scope, receive, send)


def forwarded_scope(scope: dict, proxies: Iterable[Network]) -> dict:
    """`scope` as the trusted proxies say it is: the nearest untrusted address of X-Forwarded-For, and the
    scheme of X-Forwarded-Proto. Unchanged when the peer is not a trusted proxy or a header is malformed."""
    proxies = tuple(proxies)
    peer = (scope.get("client") or (None, None))[0]
    if not _trusted(peer, proxies):
        return scope
    headers = _headers(scope)
    scope = dict(scope)
    if (client := _client(headers.get(b"x-forwarded-for", b""), proxies)) is not None:
        scope["client"] = (client, 0)
    proto = headers.get(b"x-forwarded-proto", b"").decode("latin-1").split(",")[-1].strip().lower()
    if proto in ("http", "https"):
        scope["scheme"] = _SCHEMES[scope["type"]][proto]
    return scope


def _headers(scope: dict) -> dict[bytes, bytes]:
    # A repeated header is joined as HTTP allows (a list): the last proxy appended to the last one.
    joined: dict[bytes, bytes] = {}
    for name, value in scope.get("headers") or ():
        name = name.lower()
        joined[name] = joined[name] + b"," + value if name in joined else value
    return joined


def _client(raw: bytes, proxies: tuple[Network, ...]) -> str | None:
    """The client as the proxies saw it: walking from the right (the nearest hop), the first address that is
    not a trusted proxy; the leftmost when every one is. None when the header is absent or not addresses."""
    hops = [hop.strip() for hop in raw.decode("latin-1").split(",") if hop.strip()]
    if not hops or any(_address(hop) is None for hop in hops):
        return None
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            return str(_address(hop))
    return str(_address(hops[0]))


def _trusted(address: str | None, proxies: tuple[Network, ...]) -> bool:
    found = _address(address)
    return found is not None and any(found in network for network in proxies if found.version == network.version)


def _address(text: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if not text:
        return None
    try:
        found = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
    mapped = getattr(found, "ipv4_mapped", None)
    return mapped or found
