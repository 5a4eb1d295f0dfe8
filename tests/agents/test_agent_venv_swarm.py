"""A two-agent langgraph-swarm team in a fresh virtualenv, observed by a real Sidewisp server (issue 31 §2).

The app (tests/agents/agent_venv_swarm.py) runs with the virtualenv's Python, outside the repository, against
daphne and a Celery worker on the test database. It adds Sidewisp by the two-line setup (`configure()` and
`observe`) or by `instrument()` alone. Its run must show on the server what the same team's run observed in
this process shows (each handoff's verdict and the run's status, at the wait and at the end), its wait must be
on the approver's dashboard, and the approval made there must reach the app through `await_decision`, which
finishes its run.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from django.urls import reverse
from sidewisp_agent import await_decision

from receipts import actions
from receipts.models import Handoff, Run
from receipts.workers import sources
from tests.agents import agent_venv_swarm as team
from tests.agents.fresh_venv import started_in_venv
from tests.agents.stored import observe

APP = Path(__file__).with_name("agent_venv_swarm.py")


def seen(operation_id: str) -> tuple[str, list[tuple[str, str, str]]]:
    """What the server shows of a run: its status and its handoffs' (sender, receiver, verdict), oldest first."""
    run = Run.objects.get(operation_id=operation_id)
    handoffs = Handoff.objects.filter(run=run).order_by("created_at", "pk")
    return run.status, list(handoffs.values_list("sender", "receiver", "verdict"))


def approval_data(handoff: Handoff) -> dict:
    return {"decision": "approve", "token": handoff.wait_part["resume_token_id"], "key": uuid.uuid4().hex}


def observed_here(approver) -> list[tuple[str, tuple]]:
    """The same team observed in this process, approved by `approver`: (outcome, what the server shows) per run."""
    operation_id = f"op-local-{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": operation_id, "operation_id": operation_id}}
    graph = team.build_team()
    waiting = observe(graph, team.ask(), config, **team.OBSERVING)
    at_wait = seen(operation_id)
    handoff = Handoff.objects.get(run__operation_id=operation_id)
    data = approval_data(handoff)
    decided = actions.decide(user=approver, handoff_id=handoff.pk, kind="approve", token=data["token"], key=data["key"])
    assert decided.decision is not None, decided.message
    command = await_decision(operation_id, timeout=5, poll=0.05, pending=graph.get_state(config).interrupts)
    done = observe(graph, command, config, **team.OBSERVING)
    return [(waiting.status, at_wait), (done.status, seen(operation_id))]


def said(app: subprocess.Popen) -> dict:
    """The app's next line of output; the test fails with what the app wrote to stderr when it ended instead."""
    line = app.stdout.readline()
    if not line:
        app.wait(timeout=30)
        pytest.fail(f"the app ended ({app.returncode}) saying nothing more: {app.stderr.read()[-3000:]}")
    return json.loads(line)


@pytest.fixture
def server(sidewisp_server, worker_process):
    """daphne and a Celery worker on the test database: a Sidewisp server as deployed."""
    return sidewisp_server


@pytest.mark.parametrize("how", ["observe", "instrument"])
def test_a_swarm_in_a_fresh_virtualenv_shows_on_the_server_as_observed_here_and_takes_the_dashboard_approval(
    venv_python, server, tmp_path, client, owner, how
):
    here = observed_here(owner)
    assert [status for status, _ in here] == ["waiting", "complete"]
    assert here[0][1] == (Run.Status.WAITING, [("alice", "bob", "WAITING_ON_APPROVAL")])
    assert here[1][1] == (Run.Status.COMPLETE, [("alice", "bob", "HEALTHY")])
    operation_id = f"op-venv-{how}"
    env = {"SIDEWISP_URL": server.url, "SIDEWISP_TOKEN": sources.issue("billing")[1]}

    with started_in_venv(venv_python, str(APP), how, operation_id, env=env, cwd=tmp_path) as app:
        # The app's run waits, its evidence delivered before observing returned.
        assert said(app) == {"operation_id": operation_id, "status": "waiting", "django": False}
        assert seen(operation_id) == here[0][1]
        handoff = Handoff.objects.get(run__operation_id=operation_id)
        assert handoff.run.source_name == "billing"

        client.force_login(owner)
        inbox = client.get(reverse("sidewisp:waits")).content.decode()
        assert f'id="wait-{handoff.pk}"' in inbox and "<code data-tool>place_order</code>" in inbox
        decided = client.post(reverse("sidewisp:wait-decide", args=[handoff.pk]), approval_data(handoff), follow=True)
        assert decided.status_code == 200

        # await_decision took the approval back; the run went on from it to its end.
        assert said(app) == {"operation_id": operation_id, "status": "complete", "django": False}
        assert app.wait(timeout=60) == 0
    assert seen(operation_id) == here[1][1]
    handoff.refresh_from_db()
    assert (handoff.wait_part["resolution"], handoff.wait_open) == ("approved", False)
