"""One middleware of an agent's stack with the arguments it was given, in a form safe to show."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain.agents.middleware import AgentMiddleware


@dataclass(frozen=True)
class Layer:
    """One middleware with its arguments; `middleware` is None for a setting that is off or not applicable."""

    middleware: AgentMiddleware | None
    args: dict[str, Any]
    label: str = ""

    def describe(self) -> dict[str, Any]:
        if self.middleware is None:
            return {"middleware": self.label, "name": f"{self.label} (off)", "args": self.args}
        return {"middleware": type(self.middleware).__name__, "name": self.middleware.name, "args": self.args}
