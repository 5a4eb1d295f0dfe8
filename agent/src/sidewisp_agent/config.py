"""Which Sidewisp server an app reports to: `configure(url=..., token=...)` or the environment.

`SIDEWISP_URL` and `SIDEWISP_TOKEN` (the older `SIDEWISP_REMOTE_URL` and `SIDEWISP_REMOTE_TOKEN` still work) name
the server and the source token made in its admin. What is missing or malformed is a `ConfigurationError` naming
the variable, raised by `check()` before the app's graph runs, never from inside it.

`SIDEWISP_WRITER_CAPACITY` and `SIDEWISP_WRITER_WAIT_SECONDS` bound the evidence writer's queue (`writer_limits`,
read by `sidewisp_agent.writer`; a Sidewisp server passes its own settings instead).
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from dataclasses import dataclass

DEFAULT_TIMEOUT = 10.0
URL_NAMES = ("SIDEWISP_URL", "SIDEWISP_REMOTE_URL")
TOKEN_NAMES = ("SIDEWISP_TOKEN", "SIDEWISP_REMOTE_TOKEN")
TIMEOUT_NAMES = ("SIDEWISP_TIMEOUT", "SIDEWISP_REMOTE_TIMEOUT")
WRITER_CAPACITY = 10_000  # entries waiting in the writer's queue before `submit` waits for room
WRITER_WAIT_SECONDS = 30.0  # how long `submit` waits for room before it drops the entry (and says so)


class ConfigurationError(Exception):
    """The app's Sidewisp settings are missing or wrong; the message names the setting and what to do."""


@dataclass(frozen=True)
class Settings:
    url: str
    token: str
    timeout: float = DEFAULT_TIMEOUT


_lock = threading.Lock()
_configured: Settings | None = None


def configure(url: str | None = None, token: str | None = None, *, timeout: float | None = None) -> Settings:
    """Report to the Sidewisp server at `url` with the source `token` (each one the environment's when None).

    Checked here, so a wrong value is an error at this call, in words, before any graph runs.
    """
    global _configured
    found = _checked(
        url if url is not None else _environment(URL_NAMES),
        token if token is not None else _environment(TOKEN_NAMES),
        timeout if timeout is not None else _timeout_from_environment(),
        by_argument=url is not None,
    )
    writer_limits()  # the writer's bounds too: a malformed one is an error here, not a log line later
    with _lock:
        _configured = found
    return found


def reset() -> None:
    """Forget `configure()`: the environment is read again (tests, or an app that reconfigures)."""
    global _configured
    with _lock:
        _configured = None


def configured() -> bool:
    """An app set a server, by `configure()` or by the environment."""
    return _configured is not None or bool(_environment(URL_NAMES))


def current() -> Settings:
    """The settings `configure()` set, else the environment's; `ConfigurationError` when they are missing or wrong."""
    with _lock:
        if _configured is not None:
            return _configured
    return _checked(_environment(URL_NAMES), _environment(TOKEN_NAMES), _timeout_from_environment())


@dataclass(frozen=True)
class WriterLimits:
    """The evidence writer's bounds: how many entries may wait, and how long a submit waits for room."""

    capacity: int = WRITER_CAPACITY
    wait_seconds: float = WRITER_WAIT_SECONDS


def writer_limits() -> WriterLimits:
    """`SIDEWISP_WRITER_CAPACITY` (at least 1) and `SIDEWISP_WRITER_WAIT_SECONDS` (at least 0), else the defaults."""
    capacity = _number("SIDEWISP_WRITER_CAPACITY", WRITER_CAPACITY, 1, int, "a whole number of entries")
    wait = _number("SIDEWISP_WRITER_WAIT_SECONDS", WRITER_WAIT_SECONDS, 0, float, "a number of seconds")
    return WriterLimits(capacity=int(capacity), wait_seconds=wait)


def _number(name: str, default: float, minimum: float, kind: type[int] | type[float], what: str) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not value >= minimum:  # also refuses NaN
        msg = f"{name} must be {what}, at least {minimum}"
        raise ConfigurationError(msg)
    return value


def _environment(names: tuple[str, ...]) -> str:
    return next((os.environ[name] for name in names if os.environ.get(name)), "")


def _timeout_from_environment() -> float:
    raw = _environment(TIMEOUT_NAMES)
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = 0.0
    if not seconds >= 0.1:  # also refuses NaN
        msg = "SIDEWISP_TIMEOUT must be a number of seconds, at least 0.1"
        raise ConfigurationError(msg)
    return seconds


def _checked(url: str, token: str, timeout: float, *, by_argument: bool = False) -> Settings:
    where = "url=" if by_argument else "SIDEWISP_URL"
    if not url:
        msg = "SIDEWISP_URL is not set: set it to your Sidewisp server's address (or call configure(url=...))"
        raise ConfigurationError(msg)
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        msg = f"{where} must be an http:// or https:// address of a Sidewisp server, such as http://sidewisp:8000"
        raise ConfigurationError(msg)
    if not token:
        msg = (
            "SIDEWISP_TOKEN is not set: make a source token in the Sidewisp admin and set it (or configure(token=...))"
        )
        raise ConfigurationError(msg)
    if any(character.isspace() for character in token):
        msg = "SIDEWISP_TOKEN must be one word (the source token exactly as the admin showed it)"
        raise ConfigurationError(msg)
    return Settings(url=url.rstrip("/"), token=token, timeout=timeout)
