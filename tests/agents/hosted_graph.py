"""Users' graphs for the hosted-mode tests (not the demo), registered through SIDEWISP_GRAPHS as file paths.

- `make_graph`, the README's example: a front desk hands invoices to payments,
  which pays only after an approval (the graph's own HumanInTheLoopMiddleware
  on `pay_invoice`). It returns a `HostedGraph` with its wait policy and
  verifier, so `{"desk": "tests/agents/hosted_graph.py:make_graph"}` alone is a
  complete registration.
- `make_express_graph`: the same desk without the approval and without a
  verifier of its own.
- `make_shop_graph`: a clerk hands a restock to a buyer, whose own `place_order`
  (named like the demo's tool, nothing to do with it) waits for the buyer's own
  HumanInTheLoopMiddleware.
- `make_broken_graph`: a factory that fails while the graph is being built.

The module ships the routes its graphs follow (`sidewisp_contracts`, spec §2).
The `# --8<--` comments mark what docs/getting-started.md shows of it ("Your first graph").

Two `create_agent` agents are nodes of one StateGraph; the first transfers
with `handoff_tool`. Each agent's stack is Sidewisp's from the admin limits
(`host.middleware`, SidewispMiddleware last) with the graph's approval gate
given as `extra`.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AnyMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from sidewisp_agent import WaitPolicy
from sidewisp_agent.evidence import digest
from sidewisp_agent.handoffs import handoff_tool

from agents.host.registry import HostedGraph, as_verifier
from agents.host.scripted import Call, Say, Script, chat_model
from agents.models import Order

# --8<-- [start:first-graph-routes]
ROUTE_VERSION = "desk/1"
SHOP_ROUTES = "shop/1"
CONTRACTS = {"desk/1": {"desk": {"payments": ["invoice_id"]}}, "shop/1": {"clerk": {"buyer": ["sku"]}}}
# The routes these graphs follow, shipped with them: starting a run adds them (agents.host.shipped),
# so `{"desk": "tests/agents/hosted_graph.py:make_graph"}` alone gives a green first run.
sidewisp_contracts = {"wait_reasons": ["irreversible_choice", "purchase_approval"], "routes": CONTRACTS}
INPUT = {"messages": [{"role": "user", "content": "Please pay invoice INV-7."}], "active_agent": "desk"}
SHOP_INPUT = {"messages": [{"role": "user", "content": "We are out of widgets, restock three."}]}
WAIT_POLICIES = {"pay_invoice": WaitPolicy(owner="ops-lead", reason="irreversible_choice", deadline_minutes=60)}
APPROVAL = {"allowed_decisions": ["approve", "reject"]}
# --8<-- [end:first-graph-routes]


class DeskState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    active_agent: NotRequired[str]
    invoice_id: NotRequired[str]
    sku: NotRequired[str]


@tool
def pay_invoice(invoice_id: str, runtime: ToolRuntime) -> str:
    """Pay the invoice (once per operation)."""
    operation_id = runtime.config["configurable"]["operation_id"]
    Order.objects.get_or_create(
        operation_id=operation_id, sku="invoice", defaults={"order_id": f"P-{invoice_id}", "quantity": 1, "amount": 1}
    )
    return f"paid {invoice_id}"


@tool
def place_order(sku: str, quantity: int, runtime: ToolRuntime) -> str:
    """Order stock from the wholesaler (once per operation)."""
    operation_id = runtime.config["configurable"]["operation_id"]
    Order.objects.get_or_create(
        operation_id=operation_id,
        sku=f"restock-{sku}",
        defaults={"order_id": f"S-{digest(operation_id, sku)[:12]}", "quantity": quantity, "amount": quantity},
    )
    return f"ordered {quantity} {sku}"


def invoice_paid(operation_id: str) -> bool:
    return Order.objects.filter(operation_id=operation_id, sku="invoice").exists()


def restocked(operation_id: str) -> bool:
    return Order.objects.filter(operation_id=operation_id, sku__startswith="restock-").exists()


DESK = Script((Call("transfer_to_payments", {"invoice_id": "INV-7"}),))
PAYMENTS = Script((Call("pay_invoice", {"invoice_id": "INV-7"}), Say("Invoice INV-7 is paid.")))
CLERK = Script((Call("transfer_to_buyer", {"sku": "widget"}),))
BUYER = Script((Call("place_order", {"sku": "widget", "quantity": 3}), Say("Three widgets are ordered.")))


# --8<-- [start:first-graph]
def make_graph(config: dict, *, checkpointer: Any, host: Any) -> HostedGraph:
    graph = _team(checkpointer, host, first=("desk", DESK), second=("payments", PAYMENTS, pay_invoice), gated=True)
    return HostedGraph(graph, wait_policies=WAIT_POLICIES, verifier=as_verifier(invoice_paid, name="invoice_paid"))
    # --8<-- [end:first-graph]


def make_express_graph(config: dict, *, checkpointer: Any, host: Any) -> Any:
    return _team(checkpointer, host, first=("desk", DESK), second=("payments", PAYMENTS, pay_invoice), gated=False)


def make_shop_graph(config: dict, *, checkpointer: Any, host: Any) -> HostedGraph:
    graph = _team(
        checkpointer, host, first=("clerk", CLERK), second=("buyer", BUYER, place_order), gated=True, routes=SHOP_ROUTES
    )
    policies = {"place_order": WaitPolicy(owner="ops-lead", reason="purchase_approval", deadline_minutes=60)}
    return HostedGraph(graph, wait_policies=policies, verifier=as_verifier(restocked, name="restocked"))


class ConfigServiceDown(RuntimeError):
    pass


def make_broken_graph(config: dict, *, checkpointer: Any, host: Any) -> Any:
    msg = "config service at 10.0.0.7 refused the token"
    raise ConfigServiceDown(msg)


# --8<-- [start:first-graph-team]
def _team(
    checkpointer: Any, host: Any, *, first: tuple, second: tuple, gated: bool, routes: str = ROUTE_VERSION
) -> Any:
    (sender, sender_script), (receiver, receiver_script, own_tool) = first, second
    transfer = handoff_tool(receiver, ["sku" if routes == SHOP_ROUTES else "invoice_id"])
    agents = {sender: (sender_script, [transfer], None), receiver: (receiver_script, [own_tool], own_tool.name)}
    builder = StateGraph(DeskState)
    for name, (script, tools, gate) in agents.items():
        extra = [HumanInTheLoopMiddleware(interrupt_on={gate: APPROVAL})] if gate and gated else []
        stack = host.middleware(name, [t.name for t in tools], route_version=routes, extra=extra)
        agent = create_agent(chat_model(script), tools=tools, middleware=stack, name=name)
        builder.add_node(name, agent, destinations=(receiver,) if name == sender else ())
    builder.add_conditional_edges(START, lambda state: state.get("active_agent") or sender, list(agents))
    return builder.compile(checkpointer=checkpointer)
    # --8<-- [end:first-graph-team]
