"""The observing side: what runs inside the user's process to record what their LangGraph team did.

The LangChain middleware, the graph observer and its stream tracking, the batched evidence writer and
its remote sink, and the decisions an approver sends back. Users import the names below from here;
the submodules import their siblings, never this package.

May import: receipts (models, ingest, verdicts, workers), agents.host.faults (test-only fault hooks),
LangChain, LangGraph, Django; never: agents.demo, agents.limits, the rest of agents.host, sidewisp.
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
