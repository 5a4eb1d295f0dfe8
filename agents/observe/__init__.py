"""The server's side of the agent package (`sidewisp_agent`, issue 31): its store and its settings.

The recording side (the middleware, the observer, the writer, decisions) is the package's; the server installs
its database as the package's store (`database`, by `writer.install` when Django starts) or, in remote mode,
the package's HTTP store on its settings (`remote`). The names below are the package's, re-exported for the
server's own callers (hosted runs, the demo).

May import: sidewisp_agent, receipts (models, ingest, verdicts, workers), agents.host.faults (test-only fault
hooks), Django; never: agents.demo, agents.limits, the rest of agents.host, sidewisp.
"""

from __future__ import annotations

from sidewisp_agent.conclusion import aconclude, conclude
from sidewisp_agent.decisions import aawait_decision, await_decision
from sidewisp_agent.handoffs import handoff_tool
from sidewisp_agent.instrumentation import instrument, uninstrument
from sidewisp_agent.middleware import SidewispMiddleware
from sidewisp_agent.observer import aobserve, observe
from sidewisp_agent.outcomes import Outcome, OutcomeVerifier, Verifier, WaitPolicy, claims_done

__all__ = [
    "Outcome",
    "OutcomeVerifier",
    "SidewispMiddleware",
    "Verifier",
    "WaitPolicy",
    "aawait_decision",
    "aconclude",
    "aobserve",
    "await_decision",
    "claims_done",
    "conclude",
    "handoff_tool",
    "instrument",
    "observe",
    "uninstrument",
]
