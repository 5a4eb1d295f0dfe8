"""Remote mode: the sink posts entries to a real server (retrying what is transient, naming what is refused),
await_decision takes an approver's dashboard decision back over the API, and an app on another process keeps
its receipts through a server restart."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import pytest
from django.conf import settings as django_settings
from django.urls import reverse
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from sidewisp_agent import decisions
from sidewisp_agent.decisions import PendingInterrupt

from agents.host.scripted import Call, Say, Script, ScriptedChatModel
from agents.observe import remote
from receipts.ingest import intake
from receipts.models import AuditEntry, Handoff, Receipt, Run, SourceToken
from receipts.verdicts import bundle
from receipts.workers import sources
from tests.agents import teams
from tests.conftest import handoff_parts, wait_until


@pytest.fixture
def billing(transactional_db) -> str:
    return sources.issue("billing")[1]


def client_for(url: str, token: str, **options) -> remote.Client:
    return remote.Client(url=url, token=token, timeout=5.0, **{"attempts": 2, "backoff": 0.01, **options})


def waiting_entries(operation_id: str, *, owner: str = "ops-lead") -> list[intake.Entry]:
    handoff_id = f"h-{uuid.uuid4().hex[:8]}"
    entries = []
    for part, value in handoff_parts("waiting"):
        if part == "wait":
            value = {**value, "owner": owner}
        entries.append(intake.PartEntry(operation_id, handoff_id, part, value, "1"))
    return entries


# --- the sink ------------------------------------------------------------------------


def test_the_sink_delivers_a_batch_to_the_server(live_server, contracts, billing):
    sink = remote.RemoteSink(client_for(live_server.url, billing))

    sink.write(waiting_entries("op-sink"))

    handoff = Handoff.objects.get(run__operation_id="op-sink")
    assert (handoff.verdict, handoff.run.source_name) == ("WAITING_ON_APPROVAL", "billing")


def test_the_sink_names_the_entry_the_server_refuses(live_server, contracts, billing):
    entries = waiting_entries("op-bad")
    # A value of the wrong type (spec v1.3: an unsafe string is redacted, never a refused entry).
    entries[2] = intake.PartEntry("op-bad", entries[2].handoff_id, "destination", {"node_id": ["/etc/x"]}, "1")

    with pytest.raises(remote.RejectedEntry) as refused:
        remote.RemoteSink(client_for(live_server.url, billing)).write(entries)

    assert (refused.value.index, refused.value.field) == (2, "entries[2].destination.node_id")
    assert refused.value.status == 400
    assert isinstance(refused.value, bundle.BundleError)  # the writer drops that one and sends the others
    assert not Receipt.objects.exists()


def test_a_revoked_token_is_refused_and_not_retried(live_server, contracts, billing):
    sources.revoke(SourceToken.objects.get(), by=None)

    with pytest.raises(remote.RemoteRefused) as refused:
        remote.RemoteSink(client_for(live_server.url, billing)).write(waiting_entries("op-revoked"))

    assert refused.value.status == 401
    assert not Run.objects.exists()


def test_an_unreachable_server_is_unavailable_and_transient():
    with pytest.raises(remote.RemoteUnavailable) as away:
        remote.RemoteSink(client_for("http://127.0.0.1:9", "swt_x")).write(waiting_entries("op-away"))

    assert away.value.transient is True  # agents.observe.writer keeps the batch and tries again


class FlakyServer(http.server.ThreadingHTTPServer):
    """A loopback HTTP server answering with `statuses` in turn (then 200), recording what it got."""

    def __init__(self, statuses: list[tuple[int, dict]]) -> None:
        self.statuses, self.bodies = list(statuses), []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                status, headers = outer.statuses.pop(0) if outer.statuses else (200, {})
                body = json.dumps({"entries": []} if status == 200 else {"error": {"field": "x", "message": "y"}})
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def flaky() -> Iterator:
    servers = []

    def _start(statuses):
        server = FlakyServer(statuses)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield _start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_5xx_and_a_429_are_retried_until_the_server_takes_the_batch(flaky):
    server = flaky([(503, {}), (429, {"Retry-After": "0"})])
    sink = remote.RemoteSink(client_for(server.url, "swt_x", attempts=3))

    sink.write(waiting_entries("op-flaky"))

    assert len(server.bodies) == 3
    assert server.bodies[0] == server.bodies[2]
    assert [e["part"] for e in server.bodies[2]["entries"]] == [
        "created",
        "reduced",
        "destination",
        "wait",
        "final_status",
    ]


def test_a_server_that_keeps_failing_is_unavailable_after_the_last_attempt(flaky):
    server = flaky([(500, {})] * 5)

    with pytest.raises(remote.RemoteUnavailable):
        remote.RemoteSink(client_for(server.url, "swt_x", attempts=2)).write(waiting_entries("op-500"))

    assert len(server.bodies) == 2


# --- decisions over the API ------------------------------------------------------------


def approval_agent():
    """One agent whose `place_order` waits for approval (the app's own graph, without Sidewisp's middleware)."""
    model = ScriptedChatModel(policy=Script((Call("place_order", {"item": "widget"}), Say("ordered"))))
    return create_agent(
        model,
        tools=[teams.place_order],
        middleware=[HumanInTheLoopMiddleware(interrupt_on={"place_order": True})],
        checkpointer=InMemorySaver(),
    )


def test_a_remote_await_decision_resumes_the_graph_after_a_dashboard_decision(
    live_server, contracts, billing, client, owner, settings
):
    settings.SIDEWISP_REMOTE_URL, settings.SIDEWISP_REMOTE_TOKEN = live_server.url, billing
    operation_id = "desk/op-remote"  # an operation id may hold a slash: it travels percent-encoded
    agent, config = approval_agent(), {"configurable": {"thread_id": "th-remote"}}
    agent.invoke({"messages": [HumanMessage("buy a widget")]}, config)
    remote.RemoteSink().write(waiting_entries(operation_id))
    pending = agent.get_state(config).interrupts
    assert decisions.await_decision(operation_id, timeout=0.2, poll=0.05, pending=pending) is None

    handoff = Handoff.objects.get(run__operation_id=operation_id)
    client.force_login(owner)
    data = {"decision": "approve", "token": handoff.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    assert client.post(reverse("sidewisp:wait-decide", args=[handoff.pk]), data, follow=True).status_code == 200
    command = decisions.await_decision(operation_id, timeout=10, poll=0.05, pending=pending)
    result = agent.invoke(command, config)

    assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == ["ordered widget"]
    assert decisions.await_decision(operation_id, timeout=0.2, poll=0.05, pending=pending) is None
    handoff.refresh_from_db()
    assert (handoff.wait_open, handoff.wait_part["resolution"]) == (False, "approved")
    assert AuditEntry.objects.get(action="wait.resume").detail["source"] == "billing"


def test_a_remote_wait_carries_its_tool_and_argument_names_to_the_inbox_and_back(
    live_server, contracts, billing, client, owner, settings
):
    # Issue 30 §3: the remote app sends its wait's pending call as conclusion.py does (names only), the approver's
    # inbox shows the tool and its argument names, and await_decision needs no `pending=` to resume.
    from sidewisp_agent.waits import pending_call_of

    settings.SIDEWISP_REMOTE_URL, settings.SIDEWISP_REMOTE_TOKEN = live_server.url, billing
    operation_id = "op-remote-names"
    agent, config = approval_agent(), {"configurable": {"thread_id": "th-names"}}
    agent.invoke({"messages": [HumanMessage("buy a widget")]}, config)
    interrupts = agent.get_state(config).interrupts
    entries = waiting_entries(operation_id)
    call = pending_call_of(operation_id, interrupts)
    handoff_token = call["resume_token_id"]
    entries = [
        intake.PartEntry(e.operation_id, e.handoff_id, e.part, {**e.value, "resume_token_id": handoff_token}, e.attempt)
        if isinstance(e, intake.PartEntry) and e.part == "wait"
        else e
        for e in entries
    ]
    names = {key: value for key, value in call.items() if key != "arg_schema"}
    remote.RemoteSink().write([*entries, intake.PendingEntry(operation_id, names)])

    handoff = Handoff.objects.get(run__operation_id=operation_id)
    client.force_login(owner)
    inbox = client.get(reverse("sidewisp:waits")).content.decode()
    row = inbox[inbox.index(f'id="wait-{handoff.pk}"') :]
    assert "<code data-tool>place_order</code> with <code data-arg-key>item</code>" in row[: row.index("</li>")]
    assert "widget" not in json.dumps(handoff.run.pending_call)  # a name, never the value
    data = {"decision": "approve", "token": handoff.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    assert client.post(reverse("sidewisp:wait-decide", args=[handoff.pk]), data, follow=True).status_code == 200
    command = decisions.await_decision(operation_id, timeout=10, poll=0.05)  # no pending=: the server has names
    result = agent.invoke(command, config)
    assert [m.content for m in result["messages"] if isinstance(m, ToolMessage)] == ["ordered widget"]


def test_a_remote_await_decision_without_any_interrupts_asks_for_them_and_claims_nothing(
    live_server, contracts, billing, client, owner, settings
):
    settings.SIDEWISP_REMOTE_URL, settings.SIDEWISP_REMOTE_TOKEN = live_server.url, billing
    remote.RemoteSink().write(waiting_entries("op-nopending"))
    handoff = Handoff.objects.get(run__operation_id="op-nopending")
    client.force_login(owner)
    data = {"decision": "approve", "token": handoff.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    client.post(reverse("sidewisp:wait-decide", args=[handoff.pk]), data)

    with pytest.raises(ValueError, match="pending="):
        decisions.await_decision("op-nopending", timeout=1, poll=0.05)

    assert handoff.decisions.get().applied_at is None


def test_a_remote_await_decision_waits_through_a_server_that_is_away(contracts, billing, settings):
    settings.SIDEWISP_REMOTE_URL, settings.SIDEWISP_REMOTE_TOKEN = "http://127.0.0.1:9", billing

    assert decisions.await_decision("op-away", timeout=0.3, poll=0.05, pending=[]) is None
    assert asyncio.run(decisions.aawait_decision("op-away", timeout=0.3, poll=0.05, pending=[])) is None


def test_the_async_remote_await_decision_claims_a_dashboard_decision(
    live_server, contracts, billing, client, owner, settings
):
    settings.SIDEWISP_REMOTE_URL, settings.SIDEWISP_REMOTE_TOKEN = live_server.url, billing
    remote.RemoteSink().write(waiting_entries("op-async"))
    handoff = Handoff.objects.get(run__operation_id="op-async")
    client.force_login(owner)
    token, key = handoff.wait_part["resume_token_id"], uuid.uuid4().hex
    data = {"decision": "reject", "token": token, "key": key, "reason": "no budget"}
    assert client.post(reverse("sidewisp:wait-decide", args=[handoff.pk]), data, follow=True).status_code == 200
    pending = [PendingInterrupt(id="i-1", value={"action_requests": [{"name": "place_order"}]})]

    command = asyncio.run(decisions.aawait_decision("op-async", timeout=10, poll=0.05, pending=pending))

    assert command.resume == {"i-1": {"decisions": [{"type": "reject", "message": "no budget"}]}}


# --- an app in its own process ----------------------------------------------------------


def start_app(server, token: str, operation_id: str, tmp_path, *args: str) -> subprocess.Popen:
    """tests/agents/remote_app.py in its own process, in remote mode, with a database it must never open."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "sidewisp.settings",
        "DEBUG": "1",
        "SIDEWISP_REMOTE_URL": server.url,
        "SIDEWISP_REMOTE_TOKEN": token,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'never-opened.sqlite3'}",
        "SIDEWISP_VAR_DIR": str(tmp_path),
        "LOG_LEVEL": "WARNING",
    }
    command = [sys.executable, "-m", "tests.agents.remote_app", operation_id, *args]
    return subprocess.Popen(
        command, env=env, cwd=django_settings.BASE_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def statuses(app: subprocess.Popen) -> list[str]:
    out, err = app.communicate(timeout=120)
    assert app.returncode == 0, err[-2000:]
    return [json.loads(line)["status"] for line in out.splitlines()]


def test_an_app_elsewhere_keeps_its_receipts_through_a_server_restart_and_delivers_them(
    sidewisp_server, billing, tmp_path
):
    sidewisp_server.stop()  # the server is away while the app runs
    app = start_app(sidewisp_server, billing, "op-restart", tmp_path)
    wait_for_log(app, "not written")  # the writer found the server away and keeps the entries

    sidewisp_server.start()

    assert statuses(app) == ["complete"]
    run = Run.objects.get(operation_id="op-restart")
    assert (run.source_name, run.status) == ("billing", Run.Status.COMPLETE)
    assert list(Handoff.objects.filter(run=run).values_list("sender", "receiver", "verdict")) == [
        ("alice", "bob", "HEALTHY")
    ]
    assert not (tmp_path / "never-opened.sqlite3").exists()


def test_an_approvers_dashboard_decision_resumes_the_app_elsewhere(sidewisp_server, billing, tmp_path, client, owner):
    app = start_app(sidewisp_server, billing, "op-elsewhere", tmp_path, "--approval")
    wait_until(
        lambda: Handoff.objects.filter(run__operation_id="op-elsewhere", verdict="WAITING_ON_APPROVAL").exists(),
        what="the app's wait on the dashboard",
    )
    handoff = Handoff.objects.get(run__operation_id="op-elsewhere")

    client.force_login(owner)
    data = {"decision": "approve", "token": handoff.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    assert client.post(reverse("sidewisp:wait-decide", args=[handoff.pk]), data, follow=True).status_code == 200

    assert statuses(app) == ["waiting", "complete"]
    handoff.refresh_from_db()
    assert (handoff.verdict, handoff.wait_part["resolution"], handoff.run.status) == ("HEALTHY", "approved", "complete")
    assert not (tmp_path / "never-opened.sqlite3").exists()


def wait_for_log(app: subprocess.Popen, text: str) -> None:
    """Read the app's log, line by line as it comes, until a line contains `text`; fail if the app ends first."""
    for line in app.stderr:
        if text in line:
            return
    pytest.fail(f"the app ended without logging {text!r}")
