"""Sidewisp's agent package: what runs inside a LangGraph app to record what its team did (issue 31).

No Django in it. An app elsewhere reports to a Sidewisp server over its ingest API:

    import sidewisp_agent
    sidewisp_agent.configure()  # SIDEWISP_URL and SIDEWISP_TOKEN, or configure(url=..., token=...)
    outcome = sidewisp_agent.observe(graph, graph_input, config)  # or sidewisp_agent.instrument() once

The recording side is all here: the middleware (`SidewispMiddleware`), the observer (`observe`, `aobserve`,
`conclude`), `instrument()`, the decisions an approver sends back (`await_decision`) and the writer that
batches the evidence (`flush` waits for it).

`configure` checks the settings and asks the server once whether it takes the token, so a missing or wrong
URL or token is a `ConfigurationError` naming it there, before any graph runs. The Sidewisp server runs the same
package with its database as the store (`sidewisp_agent.store`).
"""

from __future__ import annotations

from .conclusion import aconclude, conclude
from .config import ConfigurationError, Settings
from .decisions import aawait_decision, await_decision
from .handoffs import handoff_tool
from .instrumentation import instrument, uninstrument
from .middleware import SidewispMiddleware
from .observer import aobserve, observe
from .outcomes import Outcome, OutcomeVerifier, Verifier, WaitPolicy, claims_done
from .writer import flush

__version__ = "0.1.0"
__all__ = [
    "ConfigurationError",
    "Outcome",
    "OutcomeVerifier",
    "Settings",
    "SidewispMiddleware",
    "Verifier",
    "WaitPolicy",
    "aawait_decision",
    "aconclude",
    "aobserve",
    "await_decision",
    "claims_done",
    "conclude",
    "configure",
    "flush",
    "handoff_tool",
    "instrument",
    "observe",
    "uninstrument",
]


def configure(
    url: str | None = None, token: str | None = None, *, timeout: float | None = None, verify: bool = True
) -> Settings:
    """Report to the Sidewisp server at `url` with the source `token` (each one SIDEWISP_URL/SIDEWISP_TOKEN when
    None); with `verify`, ask the server whether it takes the token (a server that is away is only logged)."""
    from . import config
    from .http import HttpStore

    found = config.configure(url, token, timeout=timeout)
    if verify:
        HttpStore().verify()
    return found
