"""The demo team as a registered graph ("demo" in SIDEWISP_GRAPHS, the default).

`make_graph` builds the scenario that `configurable.scenario` names; the
module's `sidewisp_description` tells the admin and the limits validation
about the team's agents, tools and scenarios without building anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.demo import tools
from agents.demo.limits import DEMO_LIMITS, TODO_AGENTS, WORKSPACE_AGENTS
from agents.demo.scenarios import SCENARIOS
from agents.demo.team import AGENT_TOOLS, ROUTE_VERSION, declared_transfers
from agents.demo.verifiers import verifier
from agents.host.registry import GraphDescription, Host, HostedGraph

DEFAULT_SCENARIO = "healthy_purchase"


def make_graph(config: Mapping[str, Any], *, checkpointer: Any, host: Host) -> HostedGraph:
    """The team of the run's scenario, its stacks from the admin limits, its workspace from the host."""
    name = (config.get("configurable") or {}).get("scenario") or DEFAULT_SCENARIO
    scenario = SCENARIOS.get(name)
    if scenario is None:
        msg = f"the demo has no scenario {name!r}"
        raise ValueError(msg)
    team = scenario.build(
        checkpointer,
        version=host.limits_version,
        workspace=host.workspace(scenario.workspace),
        dry_run=host.dry_run,
        host=host,
    )
    check = verifier(scenario.verifier) if scenario.verifier else None
    return HostedGraph(team.graph, wait_policies=team.wait_policies, verifier=check)


def _order_amount(args: Mapping[str, Any]) -> int:
    return tools.order_amount(str(args.get("sku", "")), int(args.get("quantity", 0) or 0))


def _agent_tools() -> dict[str, tuple[str, ...]]:
    names = {agent: [t.name for t in own] for agent, own in AGENT_TOOLS.items()}
    for transfer in declared_transfers(ROUTE_VERSION):
        names.setdefault(transfer.sender, []).append(f"transfer_to_{transfer.receiver}")
    return {agent: tuple(own) for agent, own in names.items()}


sidewisp_description = GraphDescription(
    agents=_agent_tools(),
    sensitive_tools=tools.SENSITIVE_TOOLS,
    effect_tools=tools.EFFECT_TOOLS,
    retryable_errors={"TransientServiceError": tools.TransientServiceError},
    amounts={"place_order": _order_amount},
    variants=SCENARIOS,
    route_version=ROUTE_VERSION,
    limits=DEMO_LIMITS,
    workspace_agents=WORKSPACE_AGENTS,
    todo_agents=TODO_AGENTS,
)
