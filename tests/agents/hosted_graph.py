"""A user's graph for the hosted-mode tests (not the demo): a front desk hands invoices to payments.

Two `create_agent` agents are nodes of one StateGraph; the desk transfers with
`handoff_tool`; payments pays only after an approval (HumanInTheLoopMiddleware
on `pay_invoice`). Each agent's stack is Sidewisp's from the admin limits
(`host.middleware`, SidewispMiddleware last) with the approval gate
given as `extra`. Registered in the tests through SIDEWISP_GRAPHS as a file path.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AnyMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agents.handoffs import handoff_tool
from agents.models import Order
from agents.scripted import Call, Say, Script, chat_model

ROUTE_VERSION = "desk/1"
CONTRACTS = {"desk/1": {"desk": {"payments": ["invoice_id"]}}}
INPUT = {"messages": [{"role": "user", "content": "Please pay invoice INV-7."}], "active_agent": "desk"}


class DeskState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    active_agent: NotRequired[str]
    invoice_id: NotRequired[str]


@tool
def pay_invoice(invoice_id: str, runtime: ToolRuntime) -> str:
    """Pay the invoice (once per operation)."""
    operation_id = runtime.config["configurable"]["operation_id"]
    Order.objects.get_or_create(
        operation_id=operation_id, sku="invoice", defaults={"order_id": f"P-{invoice_id}", "quantity": 1, "amount": 1}
    )
    return f"paid {invoice_id}"


def invoice_paid(operation_id: str) -> bool:
    return Order.objects.filter(operation_id=operation_id, sku="invoice").exists()


DESK = Script((Call("transfer_to_payments", {"invoice_id": "INV-7"}),))
PAYMENTS = Script((Call("pay_invoice", {"invoice_id": "INV-7"}), Say("Invoice INV-7 is paid.")))


def make_graph(config: dict, *, checkpointer: Any, host: Any) -> Any:
    transfer = handoff_tool("payments", ["invoice_id"])
    agents = {"desk": (DESK, [transfer], None), "payments": (PAYMENTS, [pay_invoice], "pay_invoice")}
    builder = StateGraph(DeskState)
    for name, (script, tools, gated) in agents.items():
        gates = [HumanInTheLoopMiddleware(interrupt_on={gated: {"allowed_decisions": ["approve", "reject"]}})]
        stack = host.middleware(
            name, [t.name for t in tools], route_version=ROUTE_VERSION, extra=gates if gated else ()
        )
        agent = create_agent(chat_model(script), tools=tools, middleware=stack, name=name)
        builder.add_node(name, agent, destinations=("payments",) if name == "desk" else ())
    builder.add_conditional_edges(START, lambda state: state.get("active_agent") or "desk", list(agents))
    return builder.compile(checkpointer=checkpointer)
