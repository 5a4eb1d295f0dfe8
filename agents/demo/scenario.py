"""One scenario of the demo: its scripts, faults and limits, and the team it builds (a variant of the demo graph)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidewisp_agent.handoffs import Fault

from agents.demo.limits import DEMO_LIMITS
from agents.demo.team import AGENT_TOOLS, AGENTS, ROUTE_VERSION, Team, Transfer, build_team, declared_transfers
from agents.host.scripted import Script
from agents.limits import AgentSettings, resolve
from agents.models import LimitsVersion

if TYPE_CHECKING:
    from agents.host.registry import Host


@dataclass(frozen=True)
class Scenario:
    """One scripted run of the demo team; `verifier` names its outcome check in agents.demo.verifiers.VERIFIERS."""

    name: str
    message: str
    policies: Mapping[str, Script]
    expected: tuple[str, ...]  # the verdict of each handoff, in the order they happen
    verifier: str | None = None
    # Per-agent settings laid over the run's limits version (a partial `agents.limits` document section).
    limits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    faults: Mapping[tuple[str, str], Fault] = field(default_factory=dict)  # (sender, receiver) -> fault
    extra_transfers: Sequence[Transfer] = ()
    held_nodes: Sequence[str] = ()
    route_version: str = ROUTE_VERSION
    description: str = ""
    workspace: str | None = None  # the seed (agents/host/workspace_seeds/<seed>) the run's workspace starts from
    # The verdicts once its approval wait is rejected (or expires), for scenarios that wait.
    after_rejection: tuple[str, ...] = ()

    def build(
        self,
        checkpointer: Any,
        *,
        version: LimitsVersion | None = None,
        workspace: Path | None = None,
        dry_run: bool = False,
        host: Host | None = None,
    ) -> Team:
        """The team with the settings of `version` (default: the current one) and this scenario's overrides.

        With a `host` (a hosted run), each agent's stack comes from `host.middleware` instead.
        """
        middleware = None
        if host is not None:

            def middleware(agent: str, tool_names: list[str]) -> list:
                return host.middleware(
                    agent,
                    tool_names,
                    overrides=self.limits.get(agent),
                    route_version=self.route_version,
                    workspace=workspace,
                )

        return build_team(
            self.policies,
            checkpointer=checkpointer,
            limits=None if host is not None else self.agent_settings(version or LimitsVersion.current()),
            transfers=self.transfers(),
            held_nodes=self.held_nodes,
            route_version=self.route_version,
            workspace=workspace,
            dry_run=dry_run,
            middleware=middleware,
        )

    def graph_input(self) -> dict:
        """What a run of this scenario starts with (`Run.input`)."""
        return {"messages": [{"role": "user", "content": self.message}], "active_agent": "triage"}

    def transfers(self) -> list[Transfer]:
        declared = [
            Transfer(t.sender, t.receiver, t.context_keys, self.faults.get((t.sender, t.receiver)))
            for t in declared_transfers(self.route_version)
        ]
        return [*declared, *self.extra_transfers]

    def agent_settings(self, version: LimitsVersion) -> dict[str, AgentSettings]:
        return {
            agent: AgentSettings(
                agent, resolve(version.document, agent, self.limits.get(agent), graph=DEMO_LIMITS), version.number
            )
            for agent in AGENTS
        }

    def tool_names(self, agent: str) -> list[str]:
        """The names of the tools `agent` gets in this scenario, as `build_team` gives them."""
        own = [f"transfer_to_{t.receiver}" for t in self.transfers() if t.sender == agent]
        return [*(t.name for t in AGENT_TOOLS[agent]), *own]
