"""The box `make run` ends its start-up with (issue 30 §6): the address to open and the demo accounts'
passwords together, and the command that prints new ones. Plain text; no Django."""

from __future__ import annotations

import re

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


def startup_box(address: str, accounts: list[tuple[str, str | None]]) -> str:
    """What `make run` prints last, once the web server answers (issue 30 §6): the address and the demo
    accounts' passwords together in one box, and the command that prints new passwords."""
    lines = [f"sidewisp: open {address}  (Ctrl-C stops everything)", ""]
    width = max((len(name) for name, _ in accounts), default=0)
    for name, password in accounts:
        shown = password if password is not None else "(set earlier; not shown again)"
        lines.append(f"  login {name:<{width}}  password {shown}")
    if accounts:
        lines.append("")
    lines.append(f"New demo passwords: {DEMO_PASSWORDS_COMMAND} (in another shell)")
    inner = max(len(line) for line in lines)
    rule = "+" + "-" * (inner + 2) + "+"
    return "\n".join([rule, *(f"| {line:<{inner}} |" for line in lines), rule])
