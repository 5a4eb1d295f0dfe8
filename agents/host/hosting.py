"""The agent runtime as `receipts` sees it (receipts.workers.runtime.Runtime), and starting a hosted run.

A hosted run (a registered graph) is started, resumed, re-verified and driven
by Sidewisp's Celery workers. An observed run is driven by the app's own
process: a decision reaches it through `sidewisp_agent.decisions.await_decision`, so
nothing is enqueued for it. Imported runs have no graph behind them.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents.host import registry, shipped
from receipts.ingest import runs
from receipts.models import Handoff, OutboxIntent, Run
from receipts.notify import outbox
from receipts.workers.runtime import Escalation, PendingCall, stored_pending_call

OBSERVED_VALUES_NOTE = "The values live in the app's own process (its checkpoint); Sidewisp never receives them."


def start(
    graph: str, graph_input: Any, *, operation_id: str | None = None, scenario: str = "", dry_run: bool = False
) -> Run:
    """Create a queued hosted run of the registered `graph` and promise its start (receipts.notify.outbox).

    The start is sent right after commit, and again by the outbox sweep if the broker was
    unreachable. The contract the graph ships is added first (agents.host.shipped). Raises
    ValueError naming the known graphs for an unknown one, naming an operation id that exists,
    or naming the version whose stored content the shipped contract would change.
    """
    if graph not in registry.graphs():
        msg = f"unknown graph {graph!r}; registered: {', '.join(sorted(registry.graphs())) or 'none'}"
        raise ValueError(msg)
    shipped.ensure(graph)
    with transaction.atomic():
        run = runs.create_hosted(graph, graph_input, operation_id=operation_id, scenario=scenario, dry_run=dry_run)
        outbox.promise(OutboxIntent.Kind.START, run.pk, run=run, key=f"start-{run.operation_id}")
    return run


def is_hosted(run: Run) -> bool:
    """A hosted run whose graph is registered in this process."""
    return run.mode == Run.Mode.HOSTED and bool(run.graph) and run.graph in registry.graphs()


def is_observed(run: Run) -> bool:
    return run.mode == Run.Mode.OBSERVED and run.source == Run.Source.AGENT


class HostingRuntime:
    """`receipts.workers.runtime.Runtime` for Sidewisp's workers (hosted runs) and observing apps (observed runs)."""

    def graphs(self) -> list[str]:
        return sorted(registry.graphs())

    def can_resume(self, run: Run) -> bool:
        return is_hosted(run) or is_observed(run)

    def can_drive(self, run: Run) -> bool:
        return is_hosted(run)

    def can_reverify(self, run: Run) -> bool:
        if not is_hosted(run):
            return False
        from agents.host import runner

        return runner.has_verifier(run)

    def can_reopen(self, run: Run) -> bool:
        # A hosted run's destination works again, then its verifier runs (so it needs one); an observed run's
        # app gets the reopen through await_decision and its observe verifies the new ending.
        # An app on another host (a source, issue 19) claims over the API, which hands it approvals only.
        return self.can_reverify(run) or (is_observed(run) and not run.source_name)

    def reopener(self, run: Run) -> str:
        if is_hosted(run):
            return f"A Sidewisp worker gives the task back to its agent from the checkpoint (graph {run.graph})."
        if is_observed(run) and run.source_name:
            return "it runs in an app on another host, which Sidewisp's API hands approvals only, not reopens."
        if is_observed(run):
            return (
                "The app's own process must resume it: await_decision(operation_id) hands it the reopen, "
                "and observe gives the task back to its agent."
            )
        return "it has no graph that Sidewisp or an observing app drives."

    def resumer(self, run: Run) -> str:
        if is_hosted(run):
            return f"A Sidewisp worker resumes it from its checkpoint (graph {run.graph})."
        if is_observed(run):
            return "The app's own process resumes it: it receives the decision through await_decision(operation_id)."
        return "Nothing resumes this run: it has no graph that Sidewisp or an observing app drives."

    def pending_call(self, run: Run) -> PendingCall | None:
        if is_hosted(run):
            from agents.host import waits

            return waits.pending_call(run)
        if is_observed(run):
            return stored_pending_call(run.pending_call, values_note=OBSERVED_VALUES_NOTE)
        return None

    def escalation_for(self, handoff: Handoff) -> Escalation:
        from agents.host import waits

        return waits.escalation_for(handoff)

    def enqueue_start(self, run_id: int) -> None:
        from agents import tasks

        tasks.start_run.delay(run_id)

    def enqueue_resume(self, decision_id: int) -> None:
        run = Run.objects.filter(decisions__pk=decision_id).first()
        if run is not None and not is_hosted(run):
            return  # an observing app picks the decision up itself (await_decision)
        from agents import tasks

        tasks.resume_run.delay(decision_id)

    def enqueue_reverify(self, run_id: int) -> None:
        from agents import tasks

        tasks.reverify.delay(run_id)
