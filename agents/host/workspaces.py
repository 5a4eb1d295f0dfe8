"""Per-run workspaces for the coder agent, and the sandbox its shell runs in.

A run whose scenario names a seed gets `VAR_DIR/workspaces/<operation_id>`,
copied from `agents/host/workspace_seeds/<seed>/` when the run starts. The seed's
`workspace.json` (test command, expected artifact, protected files) stays in
the seed: the agent can edit its workspace, never the rules it is checked by.

The sandbox (Linux): the shell and the verifier's test command run in new
user, mount and network namespaces where every mount is remounted read-only
except the workspace, with every capability dropped before the command runs
(so it cannot remount anything writable again) and no network. Reads are not
confined: a command can read whatever the worker's user can read.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from langchain.agents.middleware import AgentMiddleware, HostExecutionPolicy, ToolCallRequest
from langchain_core.messages import ToolMessage

SEEDS_DIR = Path(__file__).with_name("workspace_seeds")
MANIFEST = "workspace.json"
SANDBOXES = ("namespace", "none")
_SAFE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# Remount everything read-only but the workspace, then drop every capability and exec the command.
_SANDBOX_SCRIPT = r"""
set -e
ws="$1"; shift
mount --bind "$ws" "$ws"
awk '{print $2}' /proc/self/mounts | sort -u | while read -r m; do
  m=$(printf '%b' "$m")
  [ "$m" = "$ws" ] && continue
  mount -o remount,bind,ro "$m" 2>/dev/null || true
done
cd "$ws"
exec setpriv --no-new-privs --bounding-set=-all --inh-caps=-all "$@"
"""


@dataclass(frozen=True)
class Manifest:
    """How a seeded workspace is checked: the seed's own rules, never the workspace's copy."""

    test_command: tuple[str, ...]
    artifact: str
    protected: tuple[str, ...]
    timeout: float


def seed_manifest(seed: str) -> Manifest:
    data = json.loads((seed_dir(seed) / MANIFEST).read_text())
    return Manifest(
        test_command=tuple(data["test_command"]),
        artifact=data["artifact"],
        protected=tuple(data.get("protected", ())),
        timeout=float(data.get("timeout", 30)),
    )


def seed_dir(seed: str) -> Path:
    path = SEEDS_DIR / seed
    if not _SAFE_ID.match(seed) or not (path / MANIFEST).is_file():
        msg = f"unknown workspace seed {seed!r}"
        raise ValueError(msg)
    return path


def workspace_path(operation_id: str) -> Path:
    if not _SAFE_ID.match(operation_id):
        msg = "an operation id names a workspace only when it is letters, digits, - and _"
        raise ValueError(msg)
    return Path(settings.VAR_DIR) / "workspaces" / operation_id


def display_path(operation_id: str = "<operation_id>") -> str:
    """The workspace as pages show it: relative to the var directory, never absolute."""
    return f"var/workspaces/{operation_id}"


def create(operation_id: str, seed: str) -> Path:
    """The run's workspace, seeded on first call; a re-delivered run finds its work as it left it."""
    path = workspace_path(operation_id)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(seed_dir(seed), path, ignore=shutil.ignore_patterns(MANIFEST, "__pycache__"))
    return path


def remove(operation_id: str) -> None:
    shutil.rmtree(workspace_path(operation_id), ignore_errors=True)


def exists(operation_id: str) -> bool:
    return workspace_path(operation_id).is_dir()


def shell_env(workspace: Path) -> dict[str, str]:
    """A minimal environment: nothing of the worker's (database URL, secret key) reaches the shell."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workspace),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def sandboxed(workspace: Path, command: Sequence[str]) -> list[str]:
    """`command` wrapped to run in the workspace sandbox (see the module docstring)."""
    unshare = ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "--net"]
    return [*unshare, "/bin/bash", "-c", _SANDBOX_SCRIPT, "sidewisp-sandbox", str(workspace), *command]


@dataclass
class WorkspaceExecutionPolicy(HostExecutionPolicy):
    """The host policy (timeouts, output limits, process group) with the shell inside the sandbox."""

    sandbox: str = "namespace"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sandbox not in SANDBOXES:
            msg = f"sandbox must be one of {', '.join(SANDBOXES)}"
            raise ValueError(msg)

    def spawn(self, *, workspace: Path, env: Mapping[str, str], command: Sequence[str]) -> Any:
        if self.sandbox == "namespace":
            command = sandboxed(Path(workspace).resolve(), command)
        return super().spawn(workspace=workspace, env=env, command=command)


def run_tests(operation_id: str, seed: str) -> bool:
    """Run the seed's test command in the run's workspace (sandboxed); True only when all holds.

    Fails when the workspace or the expected artifact is missing, a protected
    file (the tests themselves) differs from the seed, the command times out,
    or it exits non-zero.
    """
    manifest = seed_manifest(seed)
    path = workspace_path(operation_id).resolve()
    if not (path / manifest.artifact).is_file():
        return False
    for name in manifest.protected:
        kept = path / name
        if not kept.is_file() or kept.read_bytes() != (seed_dir(seed) / name).read_bytes():
            return False
    process = subprocess.Popen(  # the seed's fixed command, never the agent's
        sandboxed(path, manifest.test_command),
        cwd=path,
        env=shell_env(path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group, so a timeout kills whatever the tests started
    )
    try:
        return process.wait(timeout=manifest.timeout) == 0
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return False


class ShellArtifactScrubber(AgentMiddleware):
    """Drops the secrets the shell's redaction found from its ToolMessage artifact (counts stay).

    `ShellToolMiddleware` redacts the output the model sees but keeps every
    match, value included, in `ToolMessage.artifact`, which the checkpointer
    stores. Put this after the shell middleware: it rewrites the message on its
    way back into the state.
    """

    name = "ShellArtifactScrubber"

    def __init__(self, *, tool_name: str = "shell") -> None:
        super().__init__()
        self.tool_name = tool_name

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        return self._scrub(request, handler(request))

    async def awrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        return self._scrub(request, await handler(request))

    def _scrub(self, request: ToolCallRequest, result: Any) -> Any:
        if request.tool_call["name"] != self.tool_name or not isinstance(result, ToolMessage):
            return result
        artifact = result.artifact if isinstance(result.artifact, dict) else {}
        found: dict[str, int] = {}
        for key in ("redaction_matches", "matches"):
            for kind, matches in (artifact.get(key) or {}).items():
                found[kind] = found.get(kind, 0) + len(matches)
        clean = {k: v for k, v in artifact.items() if k not in ("redaction_matches", "matches")}
        return result.model_copy(update={"artifact": {**clean, "redactions": found}})
