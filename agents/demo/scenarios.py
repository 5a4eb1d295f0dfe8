"""The scenario catalogue: one real team run per verdict.

Every verdict comes from the graph really misbehaving (a transfer that drops
its ToolMessage, a goto to an undeclared agent, a node held before it starts,
an agent claiming an order it never placed...), never from writing receipts.
The `Scenario` itself (what one builds) is agents.demo.scenario; this module is the catalogue.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from sidewisp_agent.handoffs import Fault
from sidewisp_agent.reopening import was_reopened

from agents.demo.scenario import Scenario
from agents.demo.team import Transfer
from agents.host import hosting
from agents.host.scripted import Call, Fail, Say, Script, Step, last_result
from receipts.ingest import runs
from receipts.models import Run

DEMO_GRAPH = "demo"

SALES_CONTEXT = {"request_type": "purchase", "customer_tier": "gold", "consent_status": "granted"}


def was_declined(messages: Sequence[BaseMessage], tool: str) -> bool:
    """The latest answer to `tool` is an approval gate's refusal (a rejection or the safe default at the deadline)."""
    for message in reversed(messages):
        if isinstance(message, ToolMessage) and message.name == tool:
            return message.status == "error" and str(message.content).startswith("User rejected")
    return False


@dataclass(frozen=True)
class Honest:
    """A script that, like a real agent, tells the truth when its gated call of `tool` was declined:
    its closing words become `declined` instead of the success the script would claim."""

    script: Script
    tool: str
    declined: str

    def __call__(self, messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> Step:
        step = self.script(messages, tool_names)
        return Say(self.declined) if isinstance(step, Say) and was_declined(messages, self.tool) else step


@dataclass(frozen=True)
class Reworked:
    """A script for the first attempt, and another once an operator reopened the task (spec §5 v1.3): a
    real agent told that its outcome verifier failed works on the task again."""

    first: Script
    after_reopen: Script

    def __call__(self, messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> Step:
        return (self.after_reopen if was_reopened(messages) else self.first)(messages, tool_names)


def transfer_arg(messages: Sequence[BaseMessage], key: str) -> str:
    """A context value the sender passed in its transfer call (the receiver's view of the handoff)."""
    for message in reversed(messages):
        for call in getattr(message, "tool_calls", []) if isinstance(message, AIMessage) else []:
            if call["name"].startswith("transfer_to_") and call["args"].get(key):
                return str(call["args"][key])
    return ""


def _field(messages: Sequence[BaseMessage], tool: str, name: str) -> str:
    match = re.search(rf"{name}=(\S+)", last_result(messages, tool))
    return match.group(1) if match else ""


def _to_support(messages: Sequence[BaseMessage]) -> dict:
    return {"request_type": "support", "ticket_id": _field(messages, "create_ticket", "ticket_id")}


def _resolve_ticket(messages: Sequence[BaseMessage]) -> dict:
    return {"ticket_id": transfer_arg(messages, "ticket_id"), "state": "resolved"}


def _to_billing(messages: Sequence[BaseMessage]) -> dict:
    return {"order_id": _field(messages, "place_order", "order_id")}


TRIAGE_TO_SALES = Script((Call("transfer_to_sales", SALES_CONTEXT),))
TRIAGE_TO_SUPPORT = Script(
    (Call("create_ticket", {"subject": "account access"}), Call("transfer_to_support", _to_support))
)
SALES_SMALL_ORDER = Script((Call("place_order", {"sku": "widget", "quantity": 2}), Say("Your order is placed.")))
SERVER_ORDER = Script((Call("place_order", {"sku": "server", "quantity": 1}), Say("Your server is ordered.")))
HONEST_SERVER_ORDER = Honest(SERVER_ORDER, "place_order", "I did not place the order: the purchase was not approved.")
SUPPORT_RESOLVES = Script((Call("update_ticket", _resolve_ticket), Say("Your ticket is resolved.")))

_CATALOGUE = [
    Scenario(
        name="healthy_purchase",
        message="I would like two widgets, please.",
        policies={"triage": TRIAGE_TO_SALES, "sales": SALES_SMALL_ORDER},
        expected=("HEALTHY",),
        verifier="order_exists",
    ),
    Scenario(
        name="healthy_support",
        message="I cannot log in to my account.",
        policies={"triage": TRIAGE_TO_SUPPORT, "support": SUPPORT_RESOLVES},
        expected=("HEALTHY",),
        verifier="ticket_state_changed",
    ),
    Scenario(
        name="healthy_billing_chain",
        message="Please order a widget and send me the invoice.",
        policies={
            "triage": TRIAGE_TO_SALES,
            "sales": Script(
                (Call("place_order", {"sku": "widget", "quantity": 1}), Call("transfer_to_billing", _to_billing))
            ),
            "billing": Script((Say("The invoice for your order is on its way."),)),
        },
        expected=("HEALTHY", "HEALTHY"),
        verifier="order_exists",
    ),
    Scenario(
        name="route_rejected",
        message="Refund my last order right now.",
        policies={"triage": Script((Call("transfer_to_refunds_desk", {"request_type": "refund"}),))},
        extra_transfers=(Transfer("triage", "refunds_desk", ("request_type",)),),
        expected=("ROUTE_REJECTED",),
        description="triage transfers to an agent that no contract declares and no node implements",
    ),
    Scenario(
        name="stale_control",
        message="I would like two widgets, please.",
        policies={"triage": TRIAGE_TO_SALES, "sales": SALES_SMALL_ORDER},
        faults={("triage", "sales"): Fault(stale_active_agent=True)},
        expected=("STALE_CONTROL",),
        verifier="order_exists",
        description="the transfer's update leaves active_agent on triage while sales runs",
    ),
    Scenario(
        name="open_tool_protocol",
        message="I would like two widgets, please.",
        policies={"triage": TRIAGE_TO_SALES, "sales": SALES_SMALL_ORDER},
        faults={("triage", "sales"): Fault(drop_tool_message=True)},
        expected=("OPEN_TOOL_PROTOCOL",),
        verifier="order_exists",
        description="the transfer drops its ToolMessage, leaving a dangling tool call",
    ),
    Scenario(
        name="context_incomplete",
        message="I would like two widgets, please.",
        policies={"triage": TRIAGE_TO_SALES, "sales": SALES_SMALL_ORDER},
        faults={("triage", "sales"): Fault(omit_keys=("consent_status",))},
        expected=("CONTEXT_INCOMPLETE",),
        verifier="order_exists",
        description="the transfer forgets consent_status",
    ),
    Scenario(
        name="destination_not_started",
        message="I would like two widgets, please.",
        policies={"triage": TRIAGE_TO_SALES, "sales": SALES_SMALL_ORDER},
        held_nodes=("sales",),
        expected=("DESTINATION_NOT_STARTED",),
        description="the sales node is held (interrupt_before), so control never reaches it",
    ),
    Scenario(
        name="waiting_on_approval",
        message="Order a server for the new office.",
        policies={"triage": TRIAGE_TO_SALES, "sales": HONEST_SERVER_ORDER},
        expected=("WAITING_ON_APPROVAL",),
        verifier="order_exists",
        after_rejection=("HEALTHY",),
        description="an order above the threshold waits for ops-lead's approval; "
        "rejected, the agent says the order was not placed",
    ),
    Scenario(
        name="false_claim_after_rejection",
        message="Order a server for the new office.",
        policies={"triage": TRIAGE_TO_SALES, "sales": SERVER_ORDER},
        expected=("WAITING_ON_APPROVAL",),
        verifier="order_exists",
        after_rejection=("FALSE_COMPLETE",),
        description="an order waits for approval; rejected, the agent still says the server is ordered",
    ),
    Scenario(
        name="uncertain_wait",
        message="Please send me the API key for my account.",
        policies={
            "triage": TRIAGE_TO_SUPPORT,
            "support": Honest(
                Script((Call("disclose_secret", {"name": "api_key"}), Say("The key was sent."))),
                "disclose_secret",
                "I did not send the key: the disclosure was not approved.",
            ),
        },
        limits={"support": {"approval": {"owner": "", "deadline_minutes": 0}}},
        expected=("UNCERTAIN",),
        verifier="ticket_state_changed",
        description="a secret disclosure waits with no owner and no deadline",
    ),
    Scenario(
        name="false_complete",
        message="I would like two widgets, please.",
        policies={
            "triage": TRIAGE_TO_SALES,
            "sales": Reworked(Script((Say("Done! Your two widgets are ordered."),)), SALES_SMALL_ORDER),
        },
        expected=("FALSE_COMPLETE",),
        verifier="order_exists",
        description="sales says the order is placed without ever placing it; reopened, it places the order",
    ),
    Scenario(
        name="slow_supplier_purchase",
        message="Order a widget; I can wait for the supplier to confirm.",
        policies={
            "triage": TRIAGE_TO_SALES,
            "sales": Script(
                (
                    Call("place_order", {"sku": "widget", "quantity": 1}),
                    Call("confirm_with_supplier", {"sku": "widget"}),
                    Say("Your widget is ordered and the supplier confirmed it."),
                )
            ),
        },
        expected=("HEALTHY",),
        verifier="order_exists",
        description="a slow supplier confirmation after the order: the run is long enough to lose its worker",
    ),
    Scenario(
        name="dead_model_after_handoff",
        message="I would like two widgets, please.",
        policies={"triage": TRIAGE_TO_SALES, "sales": Script((Fail(),))},
        expected=("HEALTHY",),
        verifier="order_exists",
        description="the handoff is sound but the sales model is down; retries hide it as a normal message",
    ),
    Scenario(
        name="busy_sales_with_reports",
        message="Do you have widgets in stock? If so, order two.",
        policies={
            "triage": TRIAGE_TO_SALES,
            "sales": Script(
                (
                    Call("check_inventory", {"sku": "widget"}),
                    Call("check_inventory", {"sku": "widget"}),
                    Call("place_order", {"sku": "widget", "quantity": 2}),
                    Say("Your order is placed."),
                )
            ),
        },
        limits={
            "sales": {
                "per_tool_limits": {"check_inventory": {"run_limit": 1}},
                "summarization": {"trigger": [{"messages": 8}], "keep": ["messages", 2]},
                "context_editing": {"trigger": 10, "keep": 1},
            }
        },
        expected=("HEALTHY",),
        verifier="order_exists",
        description="retries exhausted, a tool-call limit, a summary and a context edit, all reported",
    ),
]

CODER_ROUTES = "routes/3"
CODER_TASK = {"request_type": "code_change", "task": "make test_calc.py pass"}
TRIAGE_TO_CODER = Script((Call("transfer_to_coder", CODER_TASK),))
RUN_TESTS = Call("shell", {"command": "python3 test_calc.py"})
SHELL_ON = {"coder": {"shell": {"enabled": True}}}

_CATALOGUE += [
    Scenario(
        name="coder_fixes_function",
        message="test_calc.py fails in the calculator workspace; please fix calc.py.",
        policies={
            "triage": TRIAGE_TO_CODER,
            # No failing test run first: a command's non-zero exit is a tool error (the shell middleware's
            # status="error"), and the run would rightly need attention; the README calls this one HEALTHY.
            "coder": Script(
                (
                    Call("grep_search", {"pattern": "def add", "output_mode": "content"}),
                    Call("shell", {"command": "sed -i 's/return a - b/return a + b/' calc.py"}),
                    RUN_TESTS,
                    Say("Fixed calc.add; the tests pass."),
                )
            ),
        },
        limits=SHELL_ON,
        expected=("HEALTHY",),
        verifier="tests_pass",
        route_version=CODER_ROUTES,
        workspace="calc",
        description="the coder fixes a failing function in its workspace; the verifier's own test run passes",
    ),
    Scenario(
        name="coder_false_claim",
        message="test_calc.py fails in the calculator workspace; please fix calc.py.",
        policies={"triage": TRIAGE_TO_CODER, "coder": Script((RUN_TESTS, Say("Fixed! All tests pass now.")))},
        limits=SHELL_ON,
        expected=("FALSE_COMPLETE",),
        verifier="tests_pass",
        route_version=CODER_ROUTES,
        workspace="calc",
        description="the coder claims the fix with the tests still failing; its workspace is kept for inspection",
    ),
]

SCENARIOS: dict[str, Scenario] = {scenario.name: scenario for scenario in _CATALOGUE}


def create_run(name: str, *, dry_run: bool = False) -> Run:
    """A new queued hosted run of the demo graph for scenario `name` (not enqueued)."""
    return runs.create_hosted(DEMO_GRAPH, _scenario(name).graph_input(), scenario=name, dry_run=dry_run)


def start_demo_run() -> Run:
    """Queue the next catalogue scenario in turn (demo traffic for `make run`)."""
    names = sorted(SCENARIOS)
    name = names[Run.objects.exclude(scenario="").count() % len(names)]
    return hosting.start(DEMO_GRAPH, _scenario(name).graph_input(), scenario=name)


def _scenario(name: str) -> Scenario:
    if name not in SCENARIOS:
        msg = f"unknown scenario {name!r}; known: {', '.join(sorted(SCENARIOS))}"
        raise ValueError(msg)
    return SCENARIOS[name]
