"""Drive one Run's graph: start it, resume it after a decision, verify its outcome again.

Celery tasks call these (agents/tasks.py); `run_scenario --inline` calls them in-process.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from agents import evidence, workspaces
from agents.checkpoints import checkpointer
from agents.decisions import resume_value, validate_decision
from agents.models import RunLimits
from agents.observer import Outcome, conclude, observe, verify
from agents.scenarios import SCENARIOS, Scenario
from receipts import broadcast
from receipts.models import Run
from receipts.recording import next_seq, record

_STATUS = {
    "complete": Run.Status.COMPLETE,
    "waiting": Run.Status.WAITING,
    "failed": Run.Status.FAILED,
    "parked": Run.Status.PARKED,
}


def start_run(run: Run) -> str:
    """Drive the run's graph from the start (or from its checkpoint) until it ends or waits."""
    scenario = _scenario_of(run)
    # Pinned on the first delivery; a re-delivery finds the same version.
    version = RunLimits.pin(run)
    _set_status(run, Run.Status.RUNNING, started=True)
    with checkpointer() as saver:
        team = scenario.build(saver, version=version, workspace=_workspace(run, scenario), dry_run=run.dry_run)
        config = graph_config(run)
        snapshot = team.graph.get_state(config)
        kwargs = {"wait_policies": team.wait_policies, "verifier": scenario.outcome_verifier()}
        if not snapshot.values:
            graph_input = {"messages": [HumanMessage(scenario.message)], "active_agent": "triage"}
            outcome = observe(team.graph, graph_input, config, **kwargs)
        elif snapshot.next and not snapshot.interrupts and not set(snapshot.next) <= set(scenario.held_nodes):
            # A re-delivered task: continue the interrupted step from the checkpoint.
            outcome = observe(team.graph, None, config, **kwargs)
        else:
            outcome = conclude(team.graph, config, **kwargs)
    return _finish(run, outcome)


def resume_run(run: Run, decision: dict) -> str:
    """Answer the run's pending approval with `decision` and drive the graph on.

    `decision` is {"type": "approve"} | {"type": "reject", "message": str} |
    {"type": "edit", "args": {...}}. It is validated before anything reaches
    the graph: LangGraph persists a resume value, so a malformed one would
    poison the thread. Raises ValueError with the reason.
    """
    clean = validate_decision(decision)
    scenario = _scenario_of(run)
    version = RunLimits.pin(run)  # the version the run started with, never a newer one
    with checkpointer() as saver:
        team = scenario.build(saver, version=version, workspace=_workspace(run, scenario), dry_run=run.dry_run)
        config = graph_config(run)
        pending = list(team.graph.get_state(config).interrupts)
        if not pending:
            msg = "this run has no pending approval to decide"
            raise ValueError(msg)
        resume = resume_value(pending, clean)
        _set_status(run, Run.Status.RUNNING)
        for item in pending:
            _record_resolved(run.operation_id, item.id)
        outcome = observe(
            team.graph,
            Command(resume=resume),
            config,
            wait_policies=team.wait_policies,
            verifier=scenario.outcome_verifier(),
        )
    return _finish(run, outcome)


def reverify(run: Run) -> str:
    """Run the scenario's outcome verifier again and record `verification`; returns pass or fail."""
    scenario = _scenario_of(run)
    check = scenario.outcome_verifier()
    if check is None:
        msg = f"scenario {scenario.name!r} has no outcome verifier"
        raise ValueError(msg)
    if scenario.workspace and not workspaces.exists(run.operation_id):
        msg = "the run's workspace was removed (its verification passed), so there is nothing to verify again"
        raise ValueError(msg)
    result = verify(run.operation_id, check, attempt=f"re-{timezone.now().strftime('%Y%m%dT%H%M%S%f')}")
    if result is None:
        msg = "the run has no handoff to attach a verification to"
        raise ValueError(msg)
    return result


def graph_config(run: Run) -> dict[str, Any]:
    return {"configurable": {"thread_id": run.thread_id, "operation_id": run.operation_id}}


def _record_resolved(operation_id: str, interrupt_id: str) -> None:
    handoff = evidence.latest_handoff(operation_id)
    if handoff is None or not handoff.wait_part:
        return
    wait = {**handoff.wait_part, "resolved": True}
    record(
        handoff_id=handoff.handoff_id,
        operation_id=operation_id,
        part="wait",
        value=wait,
        attempt=f"resolved-{evidence.digest(interrupt_id)}",
    )


def _scenario_of(run: Run) -> Scenario:
    scenario = SCENARIOS.get(run.scenario)
    if scenario is None:
        msg = f"run {run.operation_id} has no known scenario"
        raise ValueError(msg)
    return scenario


def _workspace(run: Run, scenario: Scenario):
    """The run's workspace (created and seeded on its first delivery); None without a seed or in a dry run."""
    if not scenario.workspace or run.dry_run:
        return None
    return workspaces.create(run.operation_id, scenario.workspace)


def _finish(run: Run, outcome: Outcome) -> str:
    status = _STATUS[outcome.status]
    ended = status in (Run.Status.COMPLETE, Run.Status.FAILED)
    _set_status(run, status, finished=ended, error=outcome.error)
    if ended and status == Run.Status.COMPLETE and workspaces.exists(run.operation_id) and _verified(run):
        # Kept when the run failed or its verification did not pass: an operator inspects it, and
        # reopening re-runs the verifier on it.
        workspaces.remove(run.operation_id)
    return str(status)


def _verified(run: Run) -> bool:
    handoff = evidence.latest_handoff(run.operation_id)
    return handoff is not None and (handoff.verification_part or {}).get("result") == "pass"


def _set_status(run: Run, status: str, *, started: bool = False, finished: bool = False, error: str = "") -> None:
    now = timezone.now()
    run.status = status
    run.heartbeat_at = now
    run.error = error[:200]
    fields = ["status", "heartbeat_at", "error", "updated_at"]
    if started and run.started_at is None:
        run.started_at = now
        fields.append("started_at")
    if finished:
        run.finished_at = now
        fields.append("finished_at")
    with transaction.atomic():
        run.save(update_fields=fields)
        event: broadcast.RunEvent = {
            "type": "run.changed",
            "run": run.pk,
            "operation_id": run.operation_id,
            "seq": next_seq(run),
            "status": str(status),
            "dry_run": run.dry_run,
            "at": now.isoformat(),
        }
        transaction.on_commit(partial(broadcast.publish, event))
