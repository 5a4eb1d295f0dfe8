"""An existing LangGraph app that adds Sidewisp in remote mode: the README's example, runnable.

A two-agent langgraph-swarm team (alice hands over to bob; bob's `place_order` waits
for a person's approval when run with `--approval`) with scripted models. Sidewisp
adds one middleware per agent, `observe` to drive the graph and `await_decision`
to take the approver's decision back from the server. Nothing here opens a
database: receipts go to `SIDEWISP_REMOTE_URL` with `SIDEWISP_REMOTE_TOKEN`.

    SIDEWISP_REMOTE_URL=http://sidewisp.example:8000 SIDEWISP_REMOTE_TOKEN=swt_... \\
        python -m tests.agents.remote_app op-42 --approval

Prints one JSON line per `observe` call: {"status": ..., "operation_id": ...}.
"""

from __future__ import annotations

import argparse
import json
import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sidewisp.settings")
django.setup()

from langchain.agents import create_agent  # noqa: E402 - Django first: Sidewisp reads its settings
from langchain.agents.middleware import HumanInTheLoopMiddleware  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph_swarm import create_handoff_tool, create_swarm  # noqa: E402
from sidewisp_agent import WaitPolicy, observe  # noqa: E402
from sidewisp_agent.decisions import await_decision  # noqa: E402
from sidewisp_agent.middleware import SidewispMiddleware  # noqa: E402

from agents.host.scripted import Call, Say, Script, ScriptedChatModel  # noqa: E402
from agents.observe import writer  # noqa: E402

ROUTE_VERSION = "teams/1"  # the contract version (made in the server's admin) these transfers follow
WAIT_POLICIES = {"place_order": WaitPolicy(owner="ops-lead", reason="purchase_approval", deadline_minutes=60)}


@tool
def place_order(item: str) -> str:
    """Place an order for an item."""
    return f"ordered {item}"


def build_team(*, approval: bool):
    alice = create_agent(
        ScriptedChatModel(policy=Script((Call("transfer_to_bob"), Say("alice done")))),
        tools=[create_handoff_tool(agent_name="bob")],
        middleware=[SidewispMiddleware(route_version=ROUTE_VERSION)],
        name="alice",
    )
    bob_steps = (Call("place_order", {"item": "widget"}), Say("I placed the order.")) if approval else (Say("done"),)
    gate = [HumanInTheLoopMiddleware(interrupt_on={"place_order": True})] if approval else []
    bob = create_agent(
        ScriptedChatModel(policy=Script(bob_steps)),
        tools=[place_order, create_handoff_tool(agent_name="alice")],
        middleware=[*gate, SidewispMiddleware(route_version=ROUTE_VERSION)],
        name="bob",
    )
    return create_swarm([alice, bob], default_active_agent="alice").compile(checkpointer=InMemorySaver())


def order_placed(operation_id: str) -> tuple[str, str, str]:
    """The outcome verifier: (name, pass|fail, receipt id). This demo's order always exists."""
    return ("order_exists", "pass", f"v-{operation_id}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("operation_id")
    parser.add_argument("--approval", action="store_true", help="bob's order waits for an approver")
    parser.add_argument("--decision-timeout", type=float, default=120.0)
    args = parser.parse_args()
    graph = build_team(approval=args.approval)
    config = {"configurable": {"thread_id": args.operation_id, "operation_id": args.operation_id}}

    sidewisp = {"wait_policies": WAIT_POLICIES, "verifier": order_placed}
    outcome = observe(graph, {"messages": [HumanMessage("buy a widget")]}, config, **sidewisp)
    print(json.dumps({"status": outcome.status, "operation_id": args.operation_id}), flush=True)
    if outcome.status == "waiting":
        pending = graph.get_state(config).interrupts
        command = await_decision(args.operation_id, timeout=args.decision_timeout, poll=0.2, pending=pending)
        if command is None:
            raise SystemExit("no decision came back in time")
        outcome = observe(graph, command, config, **sidewisp)
        print(json.dumps({"status": outcome.status, "operation_id": args.operation_id}), flush=True)
    # observe returned before its receipts were delivered: the app keeps them until the server has them
    # (within the writer's flush timeout), as an app that must not lose a run's evidence at exit does.
    writer.flush()


if __name__ == "__main__":
    main()
