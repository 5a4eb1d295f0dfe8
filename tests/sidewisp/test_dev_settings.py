"""What `make run` chose reaches a second shell's `manage.py` (var/dev-settings.env); the environment wins.

Also: notification links follow `make run`'s own address, and production without SIDEWISP_BASE_URL warns.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings

from sidewisp.ops import devenv
from sidewisp.ops.checks import BASE_URL_UNSET

GRAPHS = json.dumps({"desk": "tests/agents/hosted_graph.py:make_graph"})
CHOSEN = {
    "DEBUG": "1",
    "REDIS_URL": "redis://127.0.0.1:6390/0",
    "SIDEWISP_GRAPHS": GRAPHS,
    "SIDEWISP_BASE_URL": "http://127.0.0.1:8877",
    "SIDEWISP_QUEUE": "sidewisp-0123456789ab",
    "SECRET_KEY": "a-real-key-never-written-to-the-file",
    "HOME": "/home/someone",
}


def test_links_point_to_the_port_make_run_listens_on_without_sidewisp_base_url():
    assert devenv.base_url("127.0.0.1", "8877", {}) == "http://127.0.0.1:8877"
    assert devenv.base_url("::1", "8877", {}) == "http://[::1]:8877"


def test_a_set_sidewisp_base_url_wins_over_make_runs_address():
    environ = {"SIDEWISP_BASE_URL": "https://sidewisp.example.com"}
    assert devenv.base_url("127.0.0.1", "8877", environ) == "https://sidewisp.example.com"


def test_the_file_holds_what_make_run_chose_readable_by_its_owner_only_and_no_secret_key(tmp_path):
    path = devenv.write(tmp_path / "var", CHOSEN)

    assert path == tmp_path / "var" / "dev-settings.env"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert devenv.read(path) == {k: v for k, v in CHOSEN.items() if k not in ("SECRET_KEY", "HOME")}
    assert "a-real-key" not in path.read_text()


def test_the_file_fills_only_what_the_environment_does_not_set(tmp_path):
    devenv.write(tmp_path, CHOSEN)
    environ = {"SIDEWISP_VAR_DIR": str(tmp_path), "SIDEWISP_QUEUE": "mine"}

    applied = devenv.apply(environ)

    assert environ["SIDEWISP_QUEUE"] == "mine"  # the environment wins
    assert environ["SIDEWISP_GRAPHS"] == GRAPHS
    assert applied == ["DEBUG", "REDIS_URL", "SIDEWISP_GRAPHS", "SIDEWISP_BASE_URL"]


def test_no_file_and_a_switched_off_file_change_nothing(tmp_path):
    assert devenv.apply({"SIDEWISP_VAR_DIR": str(tmp_path)}) == []
    devenv.write(tmp_path, CHOSEN)
    environ = {"SIDEWISP_VAR_DIR": str(tmp_path), devenv.SWITCH: "off"}
    assert devenv.apply(environ) == []
    assert set(environ) == {"SIDEWISP_VAR_DIR", devenv.SWITCH}


def _second_shell(tmp_path, **env: str) -> dict:
    """`python manage.py ...` in a shell that exported nothing of make run's (no DEBUG, no SECRET_KEY)."""
    skip = {"DEBUG", "SECRET_KEY", "SIDEWISP_GRAPHS", "SIDEWISP_BASE_URL", "SIDEWISP_QUEUE", devenv.SWITCH}
    clean = {k: v for k, v in os.environ.items() if k not in skip}
    code = (
        "import json; from django.conf import settings; from agents.host import registry; "
        "print(json.dumps([settings.DEBUG, sorted(registry.graphs()), settings.SIDEWISP_BASE_URL]))"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=settings.BASE_DIR,
        env={**clean, "SIDEWISP_VAR_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path}/db.sqlite3", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_second_shell_runs_manage_py_with_make_runs_settings(tmp_path):
    devenv.write(tmp_path, {k: v for k, v in CHOSEN.items() if k != "REDIS_URL"})

    debug, graphs, base_url = _second_shell(tmp_path)

    assert (debug, graphs, base_url) == (True, ["desk"], "http://127.0.0.1:8877")


def test_a_variable_set_in_the_second_shell_wins_over_the_file(tmp_path):
    devenv.write(tmp_path, {k: v for k, v in CHOSEN.items() if k != "REDIS_URL"})

    _, graphs, base_url = _second_shell(tmp_path, SIDEWISP_BASE_URL="https://ops.example.com", SIDEWISP_GRAPHS="")

    assert (graphs, base_url) == (["demo"], "https://ops.example.com")


@override_settings(DEBUG=False, SIDEWISP_BASE_URL_CONFIGURED=False)
def test_production_without_sidewisp_base_url_warns_naming_the_variable():
    found = [message for message in run_checks(tags=["sidewisp"]) if message.id == BASE_URL_UNSET]

    assert len(found) == 1
    assert found[0].msg.startswith("SIDEWISP_BASE_URL is not set: links in notifications point to http://")
    assert "SIDEWISP_BASE_URL" in found[0].hint


def test_a_set_base_url_or_development_does_not_warn():
    with override_settings(DEBUG=False, SIDEWISP_BASE_URL_CONFIGURED=True):
        assert not [m for m in run_checks(tags=["sidewisp"]) if m.id == BASE_URL_UNSET]
    with override_settings(DEBUG=True, SIDEWISP_BASE_URL_CONFIGURED=False):
        assert not [m for m in run_checks(tags=["sidewisp"]) if m.id == BASE_URL_UNSET]
