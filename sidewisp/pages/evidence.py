"""A stale-control or open-tool-protocol handoff's evidence side by side: declared vs what the state says."""

from __future__ import annotations

from dataclasses import dataclass, field

from receipts import actions
from receipts.models import Handoff


@dataclass(frozen=True)
class Evidence:
    """A stale-control or open-tool-protocol handoff's evidence side by side: declared vs what the state says."""

    receiver: str
    route_version: str
    required_keys: list[str]
    tool_call_id: str
    goto: str
    active_before: str
    active_after: str
    context_keys: list[str]
    tool_message_ids: list[str]
    sender: str
    turn_call_ids: list[str] = field(default_factory=list)  # spec v1.3: every call of the AI turn that made it

    @property
    def open_tool_call(self) -> str:
        return self.tool_call_id if self.tool_call_id and self.tool_call_id not in self.tool_message_ids else ""

    @property
    def other_turn_calls(self) -> list[str]:
        """The calls made in the same AI message as the transfer (empty when it was made alone or not recorded)."""
        return [i for i in self.turn_call_ids if i != self.tool_call_id]

    @property
    def open_turn_calls(self) -> list[str]:
        """The turn's other calls the update answers with no ToolMessage: the destination gets them open."""
        return [i for i in self.other_turn_calls if i not in self.tool_message_ids]

    @property
    def missing_keys(self) -> list[str]:
        return [k for k in self.required_keys if k not in self.context_keys]


def reconcile_evidence(handoff: Handoff) -> Evidence | None:
    if handoff.verdict not in actions.STOPPABLE:
        return None
    created, reduced = handoff.created_part or {}, handoff.reduced_part or {}
    return Evidence(
        receiver=created.get("receiver") or "",
        route_version=created.get("route_version") or "",
        required_keys=list(created.get("required_context_keys") or []),
        tool_call_id=created.get("tool_call_id") or "",
        goto=reduced.get("goto") or "",
        active_before=reduced.get("active_agent_before") or "",
        active_after=reduced.get("active_agent_after") or "",
        context_keys=list(reduced.get("context_keys") or []),
        tool_message_ids=list(reduced.get("tool_message_ids") or []),
        sender=created.get("sender") or "",
        turn_call_ids=list(created.get("turn_tool_call_ids") or []),
    )
