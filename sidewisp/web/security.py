"""Content-Security-Policy on every response.

Django 5.2 has no built-in CSP. Pages load only our own vendored scripts and
styles (no inline script, no eval), so the policy can be strict.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http import HttpRequest, HttpResponse

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response


class SameOriginWebSocket:
    """ASGI wrapper: accept a WebSocket only from the page's own origin or a configured trusted one.

    Browsers send cookies with a WebSocket from any site, so the origin is the
    check. It compares scheme, host and port: the socket's own origin (its Host
    header, http for ws and https for wss) or an entry of CSRF_TRUSTED_ORIGINS.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.app(scope, receive, send)


def origin_allowed(scope: dict) -> bool:
    headers = dict(scope.get("headers") or [])
    origin = headers.get(b"origin", b"").decode("latin-1")
    if not origin:
        return False
    allowed = {_normalized(entry) for entry in settings.CSRF_TRUSTED_ORIGINS}
    if host := headers.get(b"host", b"").decode("latin-1"):
        allowed.add(_normalized(f"{'https' if scope.get('scheme') == 'wss' else 'http'}://{host}"))
    return _normalized(origin) in allowed


def _normalized(origin: str) -> str:
    """scheme://host:port in lower case, with the scheme's default port spelled out."""
    parts = urlsplit(origin.strip().lower())
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return ""
    return f"{parts.scheme}://{parts.hostname}:{port}" if parts.hostname else ""
