"""What validating a limits document needs to know about the world: the agents' tools, owners, wait reasons.

The validation itself is pure: lookups that need the database (does this owner exist? is this wait
reason known?) are passed in as callables; `team_checks` passes the real ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.limits import described
from agents.limits.defaults import FILE_SEARCH_TOOLS, SHELL_TOOL
from agents.limits.document import merge


@dataclass
class Checks:
    """What validation needs to know about the world (tools, owners, wait reasons).

    The facts about tools (which are sensitive, which have effects, which have
    an amount, which errors may be retried) default to what the registered
    graphs describe (`agents.host.graphs.GraphDescription`).
    """

    tools_by_agent: Mapping[str, Iterable[str]]
    owner_exists: Callable[[str], bool] | None = None
    reason_exists: Callable[[str], bool] | None = None
    sensitive_tools: Mapping[str, str] | None = None
    effect_tools: frozenset[str] | None = None
    amount_tools: frozenset[str] | None = None
    retryable_errors: Mapping[str, type[Exception] | None] | None = None
    graph_limits: Mapping[str, Mapping[str, Any]] | None = None
    workspace_agents: frozenset[str] | None = None
    all_tools: set[str] = field(init=False)

    def __post_init__(self) -> None:
        if self.sensitive_tools is None:
            self.sensitive_tools = described.sensitive_tools()
        if self.effect_tools is None:
            self.effect_tools = described.effect_tools()
        if self.amount_tools is None:
            self.amount_tools = frozenset(described.amounts())
        if self.retryable_errors is None:
            self.retryable_errors = described.retryable_errors()
        if self.graph_limits is None:
            self.graph_limits = described.limits_by_agent()
        if self.workspace_agents is None:
            self.workspace_agents = described.workspace_agents()
        self.tools_by_agent = {agent: set(names) for agent, names in self.tools_by_agent.items()}
        # A workspace agent's tools come from its middleware, whichever settings turn them on.
        for agent in self.workspace_agents & set(self.tools_by_agent):
            self.tools_by_agent[agent] |= {SHELL_TOOL, *FILE_SEARCH_TOOLS}
        self.all_tools = set().union(*self.tools_by_agent.values()) if self.tools_by_agent else set()

    def graph_of(self, agent: str) -> Mapping[str, Any]:
        """The limits the agent's own graph registers ({} for an agent no graph describes)."""
        return (self.graph_limits or {}).get(agent) or {}

    def every_graph(self) -> dict[str, Any]:
        """Every graph's own limits laid together: what "default" is checked over."""
        combined: dict[str, Any] = {}
        for layer in (self.graph_limits or {}).values():
            combined = merge(combined, layer)
        return combined


def team_checks() -> Checks:
    """Checks against the registered graphs: their agents' tools, existing users and groups, known wait reasons."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from receipts.models import WaitReason

    user_model = get_user_model()

    def owner_exists(name: str) -> bool:
        return user_model.objects.filter(**{user_model.USERNAME_FIELD: name}).exists() or (
            Group.objects.filter(name=name).exists()
        )

    return Checks(
        tools_by_agent=described.agent_tools(),
        owner_exists=owner_exists,
        reason_exists=lambda code: WaitReason.objects.filter(code=code).exists(),
    )
