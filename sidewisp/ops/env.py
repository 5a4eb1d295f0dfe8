"""Tiny helpers that read settings from the environment and fail loudly.

A bad value stops the process at start-up with a message naming the variable,
instead of surfacing later as a confusing error deep inside a request.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import unquote

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    msg = f"{name} must be one of 1/0, true/false, yes/no, on/off (got {raw!r})"
    raise ImproperlyConfigured(msg)


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        msg = f"{name} must be a whole number (got {raw!r})"
        raise ImproperlyConfigured(msg) from None
    if value < minimum:
        msg = f"{name} must be at least {minimum} (got {value})"
        raise ImproperlyConfigured(msg)
    return value


def env_float(name: str, default: float, *, minimum: float = 0.0) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        msg = f"{name} must be a number (got {raw!r})"
        raise ImproperlyConfigured(msg) from None
    if value < minimum:
        msg = f"{name} must be at least {minimum} (got {value})"
        raise ImproperlyConfigured(msg)
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_url(name: str, default: str, *, schemes: tuple[str, ...]) -> str:
    value = os.environ.get(name, default).strip()
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in schemes:
        msg = f"{name} must be a URL starting with one of {', '.join(s + '://' for s in schemes)}"
        raise ImproperlyConfigured(msg)
    return value


# --- Metrics and traces (sidewisp/metrics.py, receipts/traces.py) ------------------------------


def env_networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """A comma-separated list of addresses or CIDR networks (`10.0.0.0/8,::1`); empty when unset."""
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            msg = f"{name} must be comma-separated IP addresses or CIDR networks (got {item!r})"
            raise ImproperlyConfigured(msg) from None
    return tuple(networks)


def env_headers(name: str) -> dict[str, str]:
    """`key=value` pairs separated by commas, values URL-encoded (the OTEL_EXPORTER_OTLP_HEADERS format).

    Values are secrets (API keys): an error names the variable and the entry's position, never its text.
    """
    headers = {}
    for position, item in enumerate(env_list(name, []), start=1):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key or not all(c.isalnum() or c in "-_" for c in key):
            msg = f"{name} entry {position} must be key=value with a header name of letters, digits, - or _"
            raise ImproperlyConfigured(msg)
        headers[key] = unquote(value.strip())
    return headers
