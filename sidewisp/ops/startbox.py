"""The box `make run` ends its start-up with (issue 30 §6): the address to open and the demo accounts'
passwords together, and the command that prints new ones. Plain text; no Django.

It is printed once every process is up (`StartupWatch`): /healthz answers "ok" only when the database, Redis,
a worker and beat all are, so the worker's and beat's start-up banners are above the box, not below it.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable

_CREATED = re.compile(r"^demo account created: login (\S+) / password (\S+)")
_EXISTS = re.compile(r"^demo account: (\S+) \(exists")


def demo_accounts(output: str) -> list[tuple[str, str | None]]:
    """(username, password) per demo account in ensure_demo_user's output: the password when it was created now,
    None for an account that already existed (its password is stored hashed, so only a new one can be shown)."""
    found: list[tuple[str, str | None]] = []
    for line in output.splitlines():
        if created := _CREATED.match(line):
            found.append((created[1], created[2]))
        elif exists := _EXISTS.match(line):
            found.append((exists[1], None))
        elif line.strip():
            print(line, flush=True)  # anything else it says (the demo webhook) is passed on as before
    return found


DEMO_PASSWORDS_COMMAND = "python manage.py demo_passwords"


def startup_box(address: str, accounts: list[tuple[str, str | None]], not_up: list[str] | None = None) -> str:
    """What `make run` prints last, once the web server answers (issue 30 §6): the address and the demo
    accounts' passwords together in one box, and the command that prints new passwords."""
    lines = [f"sidewisp: open {address}  (Ctrl-C stops everything)", ""]
    width = max((len(name) for name, _ in accounts), default=0)
    for name, password in accounts:
        shown = password if password is not None else f"set earlier; `{DEMO_PASSWORDS_COMMAND}` prints a new one"
        lines.append(f"  login {name:<{width}}  password {shown}")
    if accounts:
        lines.append("")
    lines.append(f"New demo passwords: {DEMO_PASSWORDS_COMMAND} (in another shell)")
    if not_up:
        lines.append(f"Not up yet: {', '.join(not_up)} (the System page says why)")
    inner = max(len(line) for line in lines)
    rule = "+" + "-" * (inner + 2) + "+"
    return "\n".join([rule, *(f"| {line:<{inner}} |" for line in lines), rule])


def health(address: str) -> dict | None:
    """/healthz's checks ({name: {"ok": ...}}) at `address`, or None while the web server does not answer."""
    try:
        with urllib.request.urlopen(f"{address}healthz", timeout=2) as response:
            body = response.read()
    except urllib.error.HTTPError as error:  # 503: it answered that something is down
        body = error.read()
    except (urllib.error.URLError, OSError):
        return None
    try:
        checks = json.loads(body).get("checks")
    except (ValueError, AttributeError):
        checks = None
    return checks if isinstance(checks, dict) else {"web": {"ok": False}}


class StartupWatch:
    """When `make run` prints its box, and the box: once every process is up, after their start-up lines.

    Should one never come up (a worker that keeps crashing), the box still comes, PATIENCE seconds after the web
    server first answered, and names what is not up yet.
    """

    PATIENCE = 60.0

    def __init__(
        self,
        address: str,
        accounts: list[tuple[str, str | None]],
        *,
        checks: Callable[[str], dict | None] = health,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.address, self.accounts, self.checks, self.clock = address, accounts, checks, clock
        self.answered_at: float | None = None
        self.not_up: list[str] = []

    def ready(self) -> bool:
        found = self.checks(self.address)
        if found is None:
            return False
        if self.answered_at is None:
            self.answered_at = self.clock()
        self.not_up = sorted(name for name, check in found.items() if not (isinstance(check, dict) and check.get("ok")))
        return not self.not_up or self.clock() - self.answered_at >= self.PATIENCE

    def say(self) -> None:
        print(startup_box(self.address, self.accounts, self.not_up), flush=True)
