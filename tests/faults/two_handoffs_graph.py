"""A user's graph with two handoffs for the crash tests: intake hands a case to analyst, analyst to reporter.

Three `create_agent` agents, each with `SidewispMiddleware` and a scripted model, are nodes of one
StateGraph; the transfers are `handoff_tool`s, each carrying one context key. The reporter files the
report (once per operation) and says so; `report_filed` is the outcome verifier, and it passes when the
report exists. Registered for worker processes through SIDEWISP_GRAPHS as a file path.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents import create_agent
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AnyMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from sidewisp_agent.handoffs import handoff_tool
from sidewisp_agent.middleware import SidewispMiddleware

from agents.host.scripted import Call, Say, Script, chat_model
from agents.models import Order

ROUTE_VERSION = "faults-two-handoffs/1"
CONTRACTS = {ROUTE_VERSION: {"intake": {"analyst": ["case_id"]}, "analyst": {"reporter": ["finding"]}}}
INPUT = {"messages": [{"role": "user", "content": "Please look into case C-7."}], "active_agent": "intake"}
REPORT_SKU = "fault-report"


class CaseState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    active_agent: NotRequired[str]
    case_id: NotRequired[str]
    finding: NotRequired[str]


@tool
def file_report(case_id: str, runtime: ToolRuntime) -> str:
    """File the case report (once per operation: a re-run files nothing new)."""
    operation_id = runtime.config["configurable"]["operation_id"]
    Order.objects.get_or_create(
        operation_id=operation_id, sku=REPORT_SKU, defaults={"order_id": f"R-{case_id}", "quantity": 1, "amount": 1}
    )
    return f"filed report for {case_id}"


def report_filed(operation_id: str) -> bool:
    return Order.objects.filter(operation_id=operation_id, sku=REPORT_SKU).exists()


SCRIPTS = {
    "intake": Script((Call("transfer_to_analyst", {"case_id": "C-7"}),)),
    "analyst": Script((Call("transfer_to_reporter", {"finding": "F-1"}),)),
    "reporter": Script((Call("file_report", {"case_id": "C-7"}), Say("The report for case C-7 is filed."))),
}


def make_graph(config: dict, *, checkpointer: Any) -> Any:
    tools = {
        "intake": [handoff_tool("analyst", ["case_id"])],
        "analyst": [handoff_tool("reporter", ["finding"])],
        "reporter": [file_report],
    }
    builder = StateGraph(CaseState)
    for name, script in SCRIPTS.items():
        middleware = [SidewispMiddleware(route_version=ROUTE_VERSION)]
        agent = create_agent(chat_model(script), tools=tools[name], middleware=middleware, name=name)
        onward = {"intake": ("analyst",), "analyst": ("reporter",)}.get(name, ())
        builder.add_node(name, agent, destinations=onward)
    builder.add_conditional_edges(START, lambda state: state.get("active_agent") or "intake", list(SCRIPTS))
    return builder.compile(checkpointer=checkpointer)
