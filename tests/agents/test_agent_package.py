"""The agent package in a fresh virtualenv with no Django (issue 31 §2).

The package is built into a wheel, installed into a new virtualenv (no system site-packages) with what it
needs at the repository's pins (tests/agents/fresh_venv.py), and run there outside the repository: it imports
without Django, refuses a missing or wrong URL or token in words at `configure()`, delivers a waiting handoff's
evidence to a real server (the verdict is the one the same evidence gets from a local app) and takes back the
decision an approver made on the dashboard. A whole team run there: test_agent_venv_swarm.py.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from django.urls import reverse

from agents.observe import writer
from receipts.ingest import intake
from receipts.models import Handoff
from receipts.workers import sources
from tests.agents.fresh_venv import in_venv, started_in_venv
from tests.conftest import handoff_parts

APP = Path(__file__).with_name("agent_venv_app.py")


def test_the_package_imports_without_django_and_django_is_not_even_installed(venv_python, tmp_path):
    check = (
        "import importlib.util, sys, sidewisp_agent, sidewisp_agent.writer, sidewisp_agent.http;"
        "import sidewisp_agent.losses, sidewisp_agent.store, sidewisp_agent.observer, sidewisp_agent.middleware;"
        "import sidewisp_agent.decisions, sidewisp_agent.instrumentation, sidewisp_agent.conclusion;"
        "assert 'django' not in sys.modules; assert importlib.util.find_spec('django') is None;"
        "assert importlib.util.find_spec('receipts') is None; print(sidewisp_agent.__file__)"
    )
    completed = in_venv(venv_python, "-c", check, cwd=tmp_path)

    assert completed.returncode == 0, completed.stderr
    assert str(venv_python.parents[1]) in completed.stdout  # the installed wheel, not the repository's source


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "SIDEWISP_URL is not set"),
        ({"SIDEWISP_URL": "sidewisp:8000"}, "must be an http:// or https:// address"),
        ({"SIDEWISP_URL": "http://127.0.0.1:9"}, "SIDEWISP_TOKEN is not set"),
    ],
)
def test_a_missing_or_malformed_setting_is_named_at_configure(venv_python, tmp_path, env, named):
    completed = in_venv(venv_python, str(APP), "unused.json", env=env, cwd=tmp_path)

    assert completed.returncode == 2, completed.stderr
    assert named in json.loads(completed.stdout)["error"]


def test_a_token_the_server_refuses_is_named_at_configure(venv_python, tmp_path, live_server, transactional_db):
    env = {"SIDEWISP_URL": live_server.url, "SIDEWISP_TOKEN": "swt_not-a-token-the-server-made"}
    completed = in_venv(venv_python, str(APP), "unused.json", env=env, cwd=tmp_path)

    assert completed.returncode == 2, completed.stderr
    assert "SIDEWISP_TOKEN was refused by the Sidewisp server" in json.loads(completed.stdout)["error"]


def _waiting_entries(operation_id: str) -> list[intake.PartEntry]:
    handoff_id = f"h-{uuid.uuid4().hex[:8]}"
    return [
        intake.PartEntry(operation_id, handoff_id, part, {**value, "owner": "ops-lead"} if part == "wait" else value)
        for part, value in handoff_parts("waiting")
    ]


def test_the_app_delivers_its_evidence_and_takes_back_the_dashboard_decision(
    venv_python, tmp_path, live_server, contracts, client, owner
):
    token = sources.issue("billing")[1]
    entries = _waiting_entries("op-venv")
    (tmp_path / "entries.json").write_text(json.dumps([intake.to_json(entry) for entry in entries]))
    env = {"SIDEWISP_URL": live_server.url, "SIDEWISP_TOKEN": token}
    with started_in_venv(venv_python, str(APP), "entries.json", env=env, cwd=tmp_path) as app:
        assert json.loads(app.stdout.readline()) == {"step": "configured", "django": False}
        delivered = json.loads(app.stdout.readline())
        counts = (delivered["flushed"], delivered["stats"]["written"], delivered["stats"]["dropped"])
        assert counts == (True, len(entries), 0)

        # The same evidence from a local app, for the verdict the server must give the remote one too.
        local = _waiting_entries("op-local")
        writer.LocalSink().write(local)
        remote_handoff = Handoff.objects.get(run__operation_id="op-venv")
        local_handoff = Handoff.objects.get(run__operation_id="op-local")
        assert remote_handoff.run.source_name == "billing"
        assert remote_handoff.verdict == local_handoff.verdict == "WAITING_ON_APPROVAL"

        client.force_login(owner)
        data = {"decision": "approve", "token": remote_handoff.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
        decided = client.post(reverse("sidewisp:wait-decide", args=[remote_handoff.pk]), data, follow=True)
        assert decided.status_code == 200

        claimed = json.loads(app.stdout.readline())
        assert (claimed["step"], claimed["type"]) == ("claimed", "approve")
        assert app.wait(timeout=60) == 0
