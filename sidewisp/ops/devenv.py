"""The development settings `make run` chose, kept under var/ for a second shell's `python manage.py ...`.

`make run` decides DEBUG, the Redis, the queue and the base URL of notification
links itself; a command typed in another shell knew none of it ("SECRET_KEY must
be set when DEBUG is off", then "unknown graph" without SIDEWISP_GRAPHS). So
`make run` writes what it chose to var/dev-settings.env and manage.py applies it
to every variable the environment does not set: the environment always wins.
No secret key is written: DEBUG=1 is what selects the development key.

Each line is `NAME=<JSON string>` (a JSON value may hold spaces and quotes); the
file is not meant for `source`. Imports nothing of Django (it runs before settings).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

FILE_NAME = "dev-settings.env"
# What `make run` chose and a second shell needs; DATABASE_URL and SIDEWISP_GRAPHS only when set.
KEYS = ("DEBUG", "DATABASE_URL", "REDIS_URL", "SIDEWISP_GRAPHS", "SIDEWISP_BASE_URL", "SIDEWISP_QUEUE")
# `make test` sets this to "off": tests never take a development run's settings.
SWITCH = "SIDEWISP_DEV_SETTINGS"
HEADER = "# Written by `make run` (sidewisp.ops.devservices); python manage.py reads it; the environment wins.\n"


def var_dir(environ: Mapping[str, str] | None = None) -> Path:
    """SIDEWISP_VAR_DIR, else var/ in the repository (as settings.VAR_DIR)."""
    environ = os.environ if environ is None else environ
    return Path(environ.get("SIDEWISP_VAR_DIR") or Path(__file__).resolve().parents[2] / "var")


def base_url(host: str, port: str, environ: Mapping[str, str]) -> str:
    """The base of notification links: SIDEWISP_BASE_URL when set, else the address the web server listens on."""
    configured = environ.get("SIDEWISP_BASE_URL", "").strip()
    if configured:
        return configured
    shown_host = f"[{host}]" if ":" in host else host
    return f"http://{shown_host}:{port}"


def write(directory: Path, environ: Mapping[str, str]) -> Path:
    """Write the chosen settings (those of KEYS that `environ` has) to `directory`/dev-settings.env."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / FILE_NAME
    lines = [f"{name}={json.dumps(environ[name])}\n" for name in KEYS if environ.get(name, "") != ""]
    # Only its owner reads it: a DATABASE_URL or REDIS_URL may carry a password.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(HEADER + "".join(lines))
    return path


def read(path: Path) -> dict[str, str]:
    """The settings in a dev-settings file ({} when there is none); lines it cannot read are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return {}
    found: dict[str, str] = {}
    for line in text.splitlines():
        name, _, raw = line.partition("=")
        if name not in KEYS:
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(value, str):
            found[name] = value
    return found


def apply(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set in `environ` each setting of the dev-settings file it lacks; the names set, in file order."""
    environ = os.environ if environ is None else environ
    if environ.get(SWITCH, "").strip().lower() in {"0", "off", "false", "no"}:
        return []
    applied = []
    for name, value in read(var_dir(environ) / FILE_NAME).items():
        if name not in environ:
            environ[name] = value
            applied.append(name)
    return applied
