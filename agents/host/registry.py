"""The graph registry as a hosted run uses it: the registered graphs, and the `Host` a factory is given.

The graphs are read from `settings.SIDEWISP_GRAPHS` by agents.host.entries (what a graph is, as
values: agents.host.graphs); their names are re-exported here, so `registry.graphs()`,
`registry.entry(name)` and `registry.HostedGraph` keep working. `Host` lives here, above the
limits (agents.limits), because the settings and middleware it gives a factory come from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidewisp_agent import WaitPolicy

from agents.host import workspaces
from agents.host.entries import (  # noqa: F401 - re-exported: the registry's names
    DEFAULT_GRAPHS,
    DESCRIPTION_ATTR,
    Entry,
    as_verifier,
    description,
    descriptions,
    entry,
    graphs,
    is_compiled_graph,
    load,
    setting_key,
)
from agents.host.graphs import GraphDescription, HostedGraph  # noqa: F401 - re-exported
from agents.limits.described import graph_limits
from agents.limits.document import AgentSettings, resolve
from agents.limits.stack import build_middleware, wait_policies, with_extra
from agents.models import LimitsVersion

if TYPE_CHECKING:
    from receipts.models import Run


class Host:
    """What Sidewisp gives a factory: the run, its pinned limits, dry run, and the agents' middleware.

    `reading` is set when the graph is built only to read its checkpoint or its
    verifier: nothing is created then (no workspace). A factory that reads the
    run (`run`, `operation_id`) or makes its workspace builds a graph of that
    run's own (`per_run`); any other is built once per limits version
    (agents.host.graphcache).
    """

    def __init__(
        self,
        run: Run | None = None,
        limits_version: LimitsVersion | None = None,
        dry_run: bool = False,
        reading: bool = False,
    ) -> None:
        self._run = run
        self.limits_version = limits_version
        self.dry_run = dry_run
        self.reading = reading
        self.workspace_seed: str | None = None
        self.wait_policies: dict[str, WaitPolicy] = {}
        self.per_run = False

    def __repr__(self) -> str:
        return f"Host(run={self._run!r}, limits_version={self.limits_version!r}, dry_run={self.dry_run})"

    @property
    def run(self) -> Run | None:
        self.per_run = True
        return self._run

    @property
    def operation_id(self) -> str:
        return self.run.operation_id if self.run is not None else ""

    def settings(self, agent: str, overrides: Mapping[str, Any] | None = None):
        """The agent's settings from the admin limits (the run's pinned version) over its graph's own limits,
        with `overrides` laid over."""
        version = self.limits_version or LimitsVersion.current()
        own = graph_limits(graph=self._run.graph if self._run is not None else None, agent=agent)
        return AgentSettings(agent, resolve(version.document, agent, overrides, graph=own), version.number)

    def middleware(
        self,
        agent: str,
        tool_names: Sequence[str],
        *,
        overrides: Mapping[str, Any] | None = None,
        route_version: str | None = None,
        workspace: Path | None = None,
        extra: Sequence[Any] = (),
    ) -> list:
        """The middleware stack the admin limits give `agent`, with `extra` (the graph's own middleware,
        e.g. an approval gate) inside it and SidewispMiddleware last, so it sees what the model really got.

        The approval waits of its gated tools take owner, reason and deadline from the same settings.
        An agent keeps one approval gate: a HumanInTheLoopMiddleware in `extra` takes the limits' gates
        of the tools it does not name (`agents.limits.stack.with_extra`).
        """
        settings_ = self.settings(agent, overrides)
        self.wait_policies.update(wait_policies(settings_, tool_names))
        stack = build_middleware(
            settings_, tool_names, route_version=route_version, workspace=workspace, dry_run=self.dry_run
        )
        return with_extra(stack, extra, agent=agent)

    def workspace(self, seed: str | None) -> Path | None:
        """The run's workspace seeded from `seed` (created on first use); None without a seed, run or in a dry run."""
        if not seed or self._run is None or self.dry_run:
            return None
        self.per_run = True
        self.workspace_seed = seed
        if self.reading:
            return workspaces.workspace_path(self.operation_id) if workspaces.exists(self.operation_id) else None
        return workspaces.create(self.operation_id, seed)
