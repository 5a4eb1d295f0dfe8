"""Outcome verifiers: did the task really happen? Never trust the final message.

`tests_pass` runs the workspace's test command itself (the seed's command, in
the sandbox, with a timeout and a minimal environment) and checks the expected
artifact, whatever the coder said about it.
"""

from __future__ import annotations

from collections.abc import Callable

from sidewisp_agent.evidence import digest

from agents.demo.scenarios import SCENARIOS
from agents.host import workspaces
from agents.models import Order, Refund, Ticket
from receipts.models import Run

Check = Callable[[str], bool]


def ticket_state_changed(operation_id: str) -> bool:
    return Ticket.objects.filter(operation_id=operation_id).exclude(state="open").exists()


def order_exists(operation_id: str) -> bool:
    return Order.objects.filter(operation_id=operation_id).exists()


def refund_exists(operation_id: str) -> bool:
    return Refund.objects.filter(operation_id=operation_id).exists()


def tests_pass(operation_id: str) -> bool:
    # The run's scenario names the workspace seed whose test command decides.
    scenario_name = Run.objects.for_operation(operation_id).values_list("scenario", flat=True).first()
    scenario = SCENARIOS.get(scenario_name or "")
    if scenario is None or not scenario.workspace:
        return False
    return workspaces.run_tests(operation_id, scenario.workspace)


VERIFIERS: dict[str, Check] = {
    "ticket_state_changed": ticket_state_changed,
    "order_exists": order_exists,
    "refund_exists": refund_exists,
    "tests_pass": tests_pass,
}


def verifier(name: str) -> Callable[[str], tuple[str, str, str]]:
    """The named verifier in the observer's shape: operation id -> (name, pass|fail, receipt id)."""
    check = VERIFIERS[name]

    def run(operation_id: str) -> tuple[str, str, str]:
        result = "pass" if check(operation_id) else "fail"
        return name, result, f"v-{digest(name, operation_id, result)}"

    return run
