"""The coder's shell: confined to its workspace, bounded in time, its output redacted, off by default."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path

import pytest
from django.core import serializers
from langchain.agents import create_agent
from langchain.agents.middleware import ShellToolMiddleware
from langchain_core.messages import ToolMessage

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, create_run
from agents.demo.team import AGENT_TOOLS, build_team
from agents.host import runner, workspaces
from agents.host.checkpoints import checkpointer
from agents.host.scripted import Call, Say, Script, ScriptedChatModel
from agents.limits import AgentSettings, LimitsError, resolve, team_checks, validate_document
from agents.limits.stack import build_layers
from receipts.models import Handoff, MiddlewareReport, Receipt, Run

CANARY = "canary-51c2e0-do-not-leak"


@pytest.fixture(autouse=True)
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    return settings.VAR_DIR


def _coder_settings(**shell) -> AgentSettings:
    return AgentSettings("coder", resolve({}, "coder", {"shell": {"enabled": True, **shell}}))


def _run_commands(workspace, *commands: str, **shell) -> list[ToolMessage]:
    """Run `commands` through the coder's configured shell middleware inside `create_agent`."""
    layers = build_layers(_coder_settings(**shell), [], workspace=workspace)
    shell_middleware = next(layer.middleware for layer in layers if isinstance(layer.middleware, ShellToolMiddleware))
    steps = [Call("shell", {"command": command}) for command in commands]
    agent = create_agent(ScriptedChatModel(policy=Script((*steps, Say("done")))), middleware=[shell_middleware])
    state = agent.invoke({"messages": [("user", "go")]})
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "outside" / "ws"
    path.mkdir(parents=True)
    return path


def test_a_command_writes_inside_its_workspace(workspace):
    (result,) = _run_commands(workspace, "echo inside > inside.txt && cat inside.txt")

    assert result.status == "success"
    assert (workspace / "inside.txt").read_text() == "inside\n"


def test_a_command_that_writes_outside_its_workspace_fails_and_writes_nothing(workspace, tmp_path):
    outside = workspace.parent

    results = _run_commands(
        workspace,
        f"echo escaped > {outside}/absolute.txt",
        "echo escaped > ../relative.txt",
        "cd .. && touch climbed.txt",
        f"python3 -c \"open('/tmp/sidewisp-escape-{tmp_path.name}', 'w').write('x')\"",
    )

    assert [r.status for r in results] == ["error"] * 4
    assert "Read-only file system" in results[0].content
    assert sorted(p.name for p in outside.iterdir()) == ["ws"]
    assert not Path(f"/tmp/sidewisp-escape-{tmp_path.name}").exists()


def test_the_shell_cannot_make_the_file_system_writable_again(workspace):
    (result,) = _run_commands(workspace, "mount -o remount,rw / && touch /sidewisp-remounted")

    assert result.status == "error"
    assert not Path("/sidewisp-remounted").exists()


def test_proc_sys_and_dev_are_read_only_too(workspace):
    results = _run_commands(workspace, "echo 1 > /proc/self/oom_score_adj", "touch /sys/sidewisp", "touch /dev/shm/sw")

    assert [r.status for r in results] == ["error"] * 3
    assert all("Read-only file system" in r.content for r in results)


def test_the_shell_sees_none_of_the_workers_environment(workspace, monkeypatch):
    monkeypatch.setenv("SIDEWISP_TEST_SECRET", CANARY)

    (result,) = _run_commands(workspace, "env")

    assert CANARY not in result.content
    assert "SIDEWISP_TEST_SECRET" not in result.content


def test_a_command_that_outlives_its_timeout_ends_quickly_with_an_error(workspace):
    started = time.monotonic()

    (result,) = _run_commands(workspace, "sleep 30", command_timeout=1)

    assert time.monotonic() - started < 10
    assert result.status == "error"
    assert "timed out after 1.0 seconds" in result.content


def test_output_beyond_the_line_limit_is_cut(workspace):
    (result,) = _run_commands(workspace, "seq 1 50", max_output_lines=5)

    assert "Output truncated at 5 lines" in result.content
    assert "\n6\n" not in result.content


def test_the_coder_has_no_shell_tool_unless_an_admin_turns_it_on(db, tmp_path):
    team = build_team({}, checkpointer=None, route_version="routes/3", workspace=tmp_path)

    tools = team.graph.nodes["coder"].bound.nodes["tools"].bound.tools_by_name

    assert "shell" not in tools
    assert {"glob_search", "grep_search"} <= set(tools)


def test_the_effective_stack_shows_the_shell_off_by_default(db):
    rows = build_layers(AgentSettings("coder", resolve({}, "coder")), [], preview=True)

    shell = [layer.describe() for layer in rows if layer.describe()["middleware"] == "ShellToolMiddleware"]
    assert shell == [
        {"middleware": "ShellToolMiddleware", "name": "ShellToolMiddleware (off)", "args": {"enabled": False}}
    ]


def test_a_scenario_that_turns_the_shell_on_gives_the_coder_its_shell(db, tmp_path):
    team = SCENARIOS["coder_fixes_function"].build(None, workspace=tmp_path)

    tools = team.graph.nodes["coder"].bound.nodes["tools"].bound.tools_by_name

    assert "shell" in tools


def test_the_shell_cannot_be_turned_on_for_everyone_or_for_another_agent(db):
    document = {"default": {"shell": {"enabled": True}}, "agents": {"sales": {"shell": {"enabled": True}}}}

    with pytest.raises(LimitsError) as caught:
        validate_document(document, team_checks())

    assert any(e.startswith("default.shell.enabled: turn the shell on for one agent") for e in caught.value.errors)
    assert any(e.startswith("agents.sales.shell.enabled: only coder") for e in caught.value.errors)


def test_an_admin_can_turn_the_shell_on_for_the_coder(db):
    document = {"default": {}, "agents": {"coder": {"shell": {"enabled": True, "command_timeout": 5}}}}

    assert validate_document(document, team_checks())["agents"]["coder"]["shell"]["enabled"] is True


def test_a_redaction_rule_with_a_broken_pattern_is_refused(db):
    document = {"agents": {"coder": {"shell": {"redaction": [{"type": "token", "pattern": "(unclosed"}]}}}}

    with pytest.raises(LimitsError) as caught:
        validate_document(document, team_checks())

    assert any(e.startswith("agents.coder.shell.redaction[0].pattern: not a valid") for e in caught.value.errors)


def test_a_timeout_beyond_the_cap_is_refused(db):
    document = {"agents": {"coder": {"shell": {"command_timeout": 3600}}}}

    with pytest.raises(LimitsError) as caught:
        validate_document(document, team_checks())

    assert any(e.startswith("agents.coder.shell.command_timeout") for e in caught.value.errors)


# --- the canary: a secret printed by a command never reaches evidence, events, logs or the model ---


@pytest.fixture
def canary_run(transactional_db, monkeypatch):
    install_team_contracts()
    coder = Script((Call("shell", {"command": "cat .env"}), Say("I read the settings file.")))
    base = SCENARIOS["coder_fixes_function"]
    scenario = dataclasses.replace(base, name="coder_canary", policies={**base.policies, "coder": coder})
    monkeypatch.setitem(SCENARIOS, "coder_canary", scenario)
    run = create_run("coder_canary")
    path = workspaces.create(run.operation_id, "calc")
    (path / ".env").write_text(f"API_KEY={CANARY}\n")
    return run


def _graph_state(run: Run) -> str:
    with checkpointer() as saver:
        graph = SCENARIOS[run.scenario].build(saver).graph
        return repr(graph.get_state(runner.graph_config(run), subgraphs=True))


def test_a_canary_printed_by_a_command_is_redacted_before_anything_is_recorded(canary_run, caplog, monkeypatch):
    from receipts.ingest import broadcast

    published = []
    real_publish = broadcast.publish
    monkeypatch.setattr(broadcast, "publish", lambda event: published.append(event) or real_publish(event))
    caplog.set_level(logging.DEBUG)

    runner.start_run(canary_run)

    state = _graph_state(canary_run)
    assert "[REDACTED_SECRET_ASSIGNMENT]" in state  # the command ran and its output was redacted...
    assert CANARY not in state  # ...before the model or the checkpoint saw it
    rows = [
        *Receipt.objects.filter(handoff__run=canary_run),
        *Handoff.objects.filter(run=canary_run),
        *MiddlewareReport.objects.filter(run=canary_run),
        Run.objects.get(pk=canary_run.pk),
    ]
    stored = serializers.serialize("json", rows)
    assert json.loads(stored)
    assert CANARY not in stored
    assert published
    assert CANARY not in repr(published)
    assert all(CANARY not in record.getMessage() for record in caplog.records)


def test_the_agent_tools_of_the_coder_come_only_from_its_middleware():
    assert AGENT_TOOLS["coder"] == ()
