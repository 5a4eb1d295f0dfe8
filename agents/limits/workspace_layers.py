"""The layers of a workspace agent (its shell and file search in the run's workspace) and of provider tool search.

A dry run gets a stand-in shell that the emulator answers: nothing is ever executed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings as django_settings
from langchain.agents.middleware import (
    AgentMiddleware,
    FilesystemFileSearchMiddleware,
    ProviderToolSearchMiddleware,
    RedactionRule,
    ShellToolMiddleware,
)
from langchain.tools import tool

from agents.host import workspaces
from agents.host.scripted import model_choice
from agents.limits.defaults import SHELL_TOOL, TOOL_SEARCH_PROVIDERS
from agents.limits.layer import Layer

# A shell stopped this long after its timeout is killed (the library waits 10 s by default).
SHELL_TERMINATION_SECONDS = 1.0
PREVIEW_WORKSPACE = "_preview"


def workspace_layers(s: Mapping[str, Any], root: Path | None, shown: str, *, dry_run: bool) -> list[Layer]:
    """The shell and file search layers of a workspace agent working in `root` (shown as `shown`)."""
    shell, search = s["shell"], s["file_search"]
    shell_args = {"enabled": shell["enabled"]}
    layers: list[Layer] = []
    if not shell["enabled"]:
        layers.append(Layer(None, shell_args, "ShellToolMiddleware"))
    elif dry_run:
        # Nothing runs in a dry run: a stand-in tool of the same name that the emulator always answers.
        layers.append(Layer(_DryRunShell(), {**shell_args, "dry_run": "emulated, never executed"}))
    elif root is None:
        layers.append(Layer(None, {**shell_args, "workspace": "none for this run"}, "ShellToolMiddleware"))
    else:
        policy = workspaces.WorkspaceExecutionPolicy(
            command_timeout=float(shell["command_timeout"]),
            startup_timeout=float(shell["command_timeout"]),
            termination_timeout=SHELL_TERMINATION_SECONDS,
            max_output_lines=shell["max_output_lines"],
            max_output_bytes=shell["max_output_bytes"],
            sandbox=shell["sandbox"],
        )
        rules = [RedactionRule(r["type"], r.get("strategy", "redact"), r.get("pattern")) for r in shell["redaction"]]
        middleware = ShellToolMiddleware(
            workspace_root=root,
            startup_commands=list(shell["startup_commands"]),
            execution_policy=policy,
            redaction_rules=rules,
            tool_name=SHELL_TOOL,
            env=workspaces.shell_env(root),
        )
        args = {
            **shell_args,
            "workspace": shown,
            "startup_commands": list(shell["startup_commands"]),
            "execution_policy": {
                "policy": "host",
                "sandbox": shell["sandbox"],
                "command_timeout": shell["command_timeout"],
                "max_output_lines": shell["max_output_lines"],
                "max_output_bytes": shell["max_output_bytes"],
            },
            # Types and strategies only: the patterns describe what a secret looks like.
            "redaction_rules": [f"{r['type']}:{r.get('strategy', 'redact')}" for r in shell["redaction"]],
        }
        layers.append(Layer(middleware, args))
        layers.append(Layer(workspaces.ShellArtifactScrubber(tool_name=SHELL_TOOL), {"tool": SHELL_TOOL}))
    if not search["enabled"]:
        layers.append(Layer(None, {"enabled": False}, "FilesystemFileSearchMiddleware"))
    elif root is None and not dry_run:
        layers.append(
            Layer(None, {"enabled": True, "root_path": "none for this run"}, "FilesystemFileSearchMiddleware")
        )
    else:
        root = root or Path(django_settings.VAR_DIR) / "workspaces" / PREVIEW_WORKSPACE
        middleware = FilesystemFileSearchMiddleware(
            root_path=str(root), use_ripgrep=False, max_file_size_mb=search["max_file_size_mb"]
        )
        layers.append(Layer(middleware, {"root_path": shown, "max_file_size_mb": search["max_file_size_mb"]}))
    return layers


def tool_search_layer(config: Mapping[str, Any], tool_names: Sequence[str]) -> Layer:
    """Provider tool search over the deferred tools, or an "(off)" row when the chosen model has none."""
    deferred = [name for name in config["deferred_tools"] if name in tool_names]
    args = {"enabled": True, "deferred_tools": deferred}
    choice = model_choice()
    provider = choice.split(":", 1)[0] if ":" in choice else choice
    if provider not in TOOL_SEARCH_PROVIDERS:
        why = "the scripted model" if choice == "scripted" else f"provider {provider!r}"
        reason = f"not applicable: {why} has no provider tool search"
        return Layer(None, {**args, "status": reason}, "ProviderToolSearchMiddleware")
    return Layer(ProviderToolSearchMiddleware(searchable_tools=deferred), args)


@tool(SHELL_TOOL)
def _dry_run_shell(command: str) -> str:
    """Execute a shell command in the run's workspace."""
    msg = "a dry run never executes a shell command"
    raise RuntimeError(msg)


class _DryRunShell(AgentMiddleware):
    """Registers the stand-in `shell` tool of a dry run (the emulator answers every call)."""

    name = "DryRunShell"
    tools = [_dry_run_shell]
