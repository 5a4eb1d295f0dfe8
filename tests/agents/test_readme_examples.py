"""The README's hosted, observed and remote examples, run as written, end with the verdicts it says (issue 28 §8).

Each starts from what a fresh clone has (the migrated contracts, no version of the example's own) and follows the
README's commands: the hosted example on a real worker, the observed block executed as it stands (with scripted
models for its `model`), the remote app in its own process against a real server.
"""

from __future__ import annotations

import re
import shlex
import threading
import uuid
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import reverse
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langgraph.checkpoint.memory import InMemorySaver

from agents.host.scripted import Call, Say, Script, ScriptedChatModel
from receipts import actions
from receipts.models import ContractVersion, Handoff, Run
from tests.agents import teams
from tests.agents.test_remote import start_app, statuses
from tests.conftest import start_worker_process, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def readme(pattern: str, text: str = README) -> str:
    (found,) = re.findall(pattern, text, re.MULTILINE | re.DOTALL)
    return found


def section(title: str) -> str:
    start = README.index(f"\n### {title}")
    return README[start : README.index("\n### ", start + 1)]


def run_readme_command(line: str) -> str:
    """`python manage.py <command> <args>` from the README, run here (the test database is the server's)."""
    words = shlex.split(line)
    assert words[:2] == ["python", "manage.py"], line
    out = StringIO()
    call_command(*words[2:], stdout=out)
    return out.getvalue().strip()


def wait_of(operation_id: str) -> Handoff | None:
    return Handoff.objects.filter(run__operation_id=operation_id, wait_open=True).first()


def approve(user, handoff: Handoff):
    token = handoff.wait_part["resume_token_id"]
    return actions.decide(user=user, handoff_id=handoff.pk, kind="approve", token=token, key=uuid.uuid4().hex)


# --- hosted ------------------------------------------------------------------------------------------


def test_the_hosted_example_waits_for_approval_then_ends_healthy(owner, settings, celery_isolation):
    hosted = section("Hosted: your graph run by Sidewisp's workers")
    graphs = readme(r"^export SIDEWISP_GRAPHS='(.+?)'$", hosted)
    settings.SIDEWISP_GRAPHS = graphs
    assert not ContractVersion.objects.filter(version="desk/1").exists()  # nothing declared by hand
    worker = start_worker_process(f"fg{uuid.uuid4().hex[:6]}", celery_isolation, extra_env={"SIDEWISP_GRAPHS": graphs})
    try:
        operation_id = run_readme_command(readme(r"^(python manage.py start_run desk --input '.+?')$", hosted))

        wait_until(lambda: Handoff.objects.filter(run__operation_id=operation_id).exists(), what="the handoff")
        wait_until(lambda: wait_of(operation_id) is not None, what="the payment's approval wait")
        waiting = wait_of(operation_id)
        assert (waiting.verdict, waiting.wait_owner) == ("WAITING_ON_APPROVAL", "ops-lead"), waiting.reason
        assert approve(owner, waiting).outcome == "done"

        run = lambda: Run.objects.get(operation_id=operation_id)  # noqa: E731
        wait_until(lambda: run().status == Run.Status.COMPLETE, what="the approved run to complete")
        assert list(run().handoffs.values_list("verdict", flat=True)) == ["HEALTHY"]
    finally:
        worker.stop()


# --- observed ----------------------------------------------------------------------------------------


def _team_model() -> ScriptedChatModel:
    """One scripted `model` for the README's alice and bob: each follows its own script by its tools."""
    alice = Script((Call("transfer_to_bob"), Say("bob takes it from here")))
    bob = Script((Call("place_order", {"item": "widget"}), Say("Two widgets are ordered.")))
    return ScriptedChatModel(policy=lambda messages, tools: (alice if "lookup" in tools else bob)(messages, tools))


def _run_observed_block(block: str) -> tuple[threading.Thread, dict]:
    names = {
        "create_agent": create_agent,
        "HumanInTheLoopMiddleware": HumanInTheLoopMiddleware,
        "model": _team_model(),
        "lookup": teams.lookup,
        "place_order": teams.place_order,
        "saver": InMemorySaver(),
        "order_exists": lambda operation_id: True,
    }

    def run() -> None:
        try:
            exec(compile(block, "README.md (observed)", "exec"), names)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            names["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, names


def test_the_observed_example_waits_for_approval_then_ends_healthy(owner):
    observed = section("Observed: your graph in your own process")
    run_readme_command(readme(r"^(python manage.py import_contracts --add \S+)$", observed))

    thread, names = _run_observed_block(readme(r"```python\n(.+?)```", observed.split("`await_decision` builds")[0]))
    wait_until(lambda: wait_of("op-42") is not None or "error" in names, what="the README app's wait")
    waiting = wait_of("op-42")
    assert (waiting.sender, waiting.receiver, waiting.verdict) == ("alice", "bob", "WAITING_ON_APPROVAL")
    assert approve(owner, waiting).outcome == "done"
    thread.join(timeout=60)

    assert "error" not in names, names.get("error")
    assert names["outcome"].status == "complete"
    assert list(Handoff.objects.filter(run__operation_id="op-42").values_list("verdict", flat=True)) == ["HEALTHY"]


# --- remote ------------------------------------------------------------------------------------------


@pytest.fixture
def fresh_server(transactional_db, celery_isolation, contracts):
    """daphne on the test database with only what a fresh clone has (no teams/1)."""
    from tests.e2e.test_live_pages import Server

    assert not ContractVersion.objects.filter(version=teams.ROUTE_VERSION).exists()
    server = Server(celery_isolation)
    server.env.update({"DEBUG": "1", "LOG_LEVEL": "ERROR"})
    server.start()
    yield server
    server.stop()


def _remote_command() -> tuple[str, list[str]]:
    words = shlex.split(
        readme(r"\(`(python -m tests\.agents\.remote_app [^`]+)`\)", section("Agents that run elsewhere"))
    )
    return words[3], words[4:]


def test_the_remote_example_waits_for_approval_then_ends_healthy(fresh_server, tmp_path, client, owner):
    from receipts.workers import sources

    token = sources.issue("billing")[1]
    run_readme_command(readme(r"\(`(python manage.py import_contracts --add [^`]+)`", section("Agents that run")))
    operation_id, args = _remote_command()
    app = start_app(fresh_server, token, operation_id, tmp_path, *args)

    wait_until(lambda: wait_of(operation_id) is not None, what="the app's wait on the dashboard")
    waiting = wait_of(operation_id)
    assert waiting.verdict == "WAITING_ON_APPROVAL", waiting.reason
    client.force_login(owner)
    data = {"decision": "approve", "token": waiting.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    assert client.post(reverse("sidewisp:wait-decide", args=[waiting.pk]), data, follow=True).status_code == 200

    assert statuses(app) == ["waiting", "complete"]
    assert list(Handoff.objects.filter(run__operation_id=operation_id).values_list("verdict", flat=True)) == ["HEALTHY"]


def test_a_remote_app_whose_routes_nobody_declared_is_unblocked_by_an_admins_declaration(
    fresh_server, tmp_path, client, owner, person
):
    from receipts.workers import sources

    token = sources.issue("billing")[1]
    operation_id, args = _remote_command()
    app = start_app(fresh_server, token, operation_id, tmp_path, *args)
    wait_until(lambda: wait_of(operation_id) is not None, what="the app's wait on the dashboard")
    blocked = wait_of(operation_id)
    assert blocked.verdict == "ROUTE_REJECTED"
    assert '"teams/1" (given as SidewispMiddleware(route_version=...))' in blocked.reason
    client.force_login(owner)
    inbox = client.get(reverse("sidewisp:waits")).content.decode()
    assert "Approve and reject are not offered: this handoff failed its route boundary" in inbox
    assert "Until then the app&#x27;s await_decision keeps waiting." in inbox

    client.force_login(person("boss", "admin"))
    (draft,) = actions.run_drafts(blocked.run)
    form = {"version": draft.version, "digest": draft.digest, "key": uuid.uuid4().hex}
    assert client.post(reverse("sidewisp:run-declare", args=[blocked.run_id]), form).status_code == 200
    assert wait_of(operation_id).verdict == "WAITING_ON_APPROVAL"
    client.force_login(owner)
    data = {"decision": "approve", "token": blocked.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    client.post(reverse("sidewisp:wait-decide", args=[blocked.pk]), data, follow=True)

    assert statuses(app) == ["waiting", "complete"]
    assert Run.objects.get(operation_id=operation_id).status == Run.Status.COMPLETE
