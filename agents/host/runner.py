"""Drive one hosted Run's graph: start it, resume it after a decision, reopen it, verify its outcome again.

The graph is the run's registered graph (agents.host.registry), built for the run
with Sidewisp's checkpointer and a `Host` (the run's pinned limits, dry run,
the agents' middleware from the admin limits). Celery tasks call these
(agents/tasks.py); `run_scenario --inline` calls them in-process.

A hosted run's failure ends on the run, not in Celery: an exception from its
graph (whether `observe` returns it as a failed outcome or raises it after
recording it) or from building its graph fails the run with the class name and
the task returns "failed". Only a transient error (agents.observe.transient) escapes,
for the task to retry from the checkpoint. The run's input is cleared as soon as
the checkpoint holds it and on every path that ends the run (receipts.ingest.runs).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.utils import timezone
from langgraph.types import Command
from sidewisp_agent import Outcome, conclude, observe
from sidewisp_agent.conclusion import final_message_of, verify
from sidewisp_agent.decisions import resume_value, validate_decision
from sidewisp_agent.reopening import reopen_command

from agents.host import registry, shipped, workspaces
from agents.host.checkpoints import checkpointer
from agents.host.registry import Host, HostedGraph
from agents.models import LimitsVersion, RunLimits
from agents.observe import database, writer
from agents.observe.transient import TRANSIENT
from receipts.ingest import runs
from receipts.ingest.recording import OBSERVER
from receipts.models import MiddlewareReport, Run

logger = logging.getLogger(__name__)

_STATUS = {
    "complete": Run.Status.COMPLETE,
    "waiting": Run.Status.WAITING,
    "failed": Run.Status.FAILED,
    "parked": Run.Status.PARKED,
}


def start_run(run: Run) -> str:
    """Drive the run's graph from the start (or from its checkpoint) until it ends or waits."""
    _check_hosted(run)
    shipped.ensure_quietly(run.graph)  # a run queued another way than hosting.start still has its contract
    # Pinned on the first delivery; a re-delivery finds the same version.
    version = RunLimits.pin(run)
    try:
        outcome = _start(run, version)
    except TRANSIENT:
        raise  # the task retries; the input stays for the graph that has not taken it yet
    except Exception as exc:  # noqa: BLE001 - e.g. the graph's factory raised: the run ends failed, not the task
        outcome = _failed(run, exc)
    return _finish(run, outcome)


def _start(run: Run, version: LimitsVersion) -> Outcome:
    with built(run, version) as hosted:
        config = graph_config(run)
        snapshot = hosted.graph.get_state(config)
        kwargs = {"wait_policies": hosted.wait_policies, "verifier": hosted.verifier}
        if not snapshot.values:
            outcome = _observed(run, hosted.graph, run.input or {}, config, **kwargs)
        elif _in_flight(hosted.graph, snapshot):
            # A re-delivered task: continue the interrupted step from the checkpoint.
            outcome = _observed(run, hosted.graph, None, config, **kwargs)
        else:
            outcome = conclude(hosted.graph, config, wait_policies=hosted.wait_policies, verifier=hosted.verifier)
        if run.input is not None and hosted.graph.get_state(config).values:
            _clear_input(run)  # the checkpoint holds the input now; the row keeps no copy of it
        _say_if_unverified(run, hosted, outcome)
    return outcome


def resume_run(run: Run, decision: dict) -> str:
    """Answer the run's pending approval with `decision` and drive the graph on.

    `decision` is {"type": "approve"} | {"type": "reject", "message": str} |
    {"type": "edit", "args": {...}}. It is validated before anything reaches
    the graph: LangGraph persists a resume value, so a malformed one would
    poison the thread. Raises ValueError with the reason.
    """
    clean = validate_decision(decision)
    _check_hosted(run)
    version = RunLimits.pin(run)  # the version the run started with, never a newer one
    with built(run, version) as hosted:
        config = graph_config(run)
        pending = list(hosted.graph.get_state(config).interrupts)
        if not pending:
            msg = "this run has no pending approval to decide"
            raise ValueError(msg)
        # observe marks the waits resolved (with the decision's resolution) before it resumes the graph.
        outcome = _observed(
            run,
            hosted.graph,
            Command(resume=resume_value(pending, clean)),
            config,
            wait_policies=hosted.wait_policies,
            verifier=hosted.verifier,
        )
        _say_if_unverified(run, hosted, outcome)
    return _finish(run, outcome)


def reopen_run(run: Run, token: str, destination: str, verifier: str, result: str) -> str:
    """Give a reopened false-complete task back to its `destination` agent (spec §5 v1.3) and drive the graph on.

    From the run's last checkpoint, the graph gets `Command(goto=destination)` with a note naming the verifier
    and its result (sidewisp_agent.reopening); when the destination ends, `observe` verifies the outcome again
    under the reopen's own attempt. Raises ValueError when the run's graph has not ended (nothing to reopen).
    """
    _check_hosted(run)
    version = RunLimits.pin(run)
    with built(run, version) as hosted:
        config = graph_config(run)
        snapshot = hosted.graph.get_state(config)
        if snapshot.interrupts or snapshot.next:
            msg = "the run's graph has not ended: there is no finished task to reopen"
            raise ValueError(msg)
        command = reopen_command(destination, verifier, result, token)
        outcome = _observed(
            run, hosted.graph, command, config, wait_policies=hosted.wait_policies, verifier=hosted.verifier
        )
        _say_if_unverified(run, hosted, outcome)
    return _finish(run, outcome)


def reverify(run: Run) -> str:
    """Run the graph's outcome verifier again and record `verification`; returns pass or fail."""
    _check_hosted(run)
    host = Host(run=run, limits_version=_pinned(run), dry_run=run.dry_run, reading=True)
    hosted = _build(run, None, host)
    if hosted.verifier is None:
        msg = f"graph {run.graph!r}{_variant(run)} has no outcome verifier"
        raise ValueError(msg)
    if host.workspace_seed and not workspaces.exists(run.operation_id):
        msg = "the run's workspace was removed (its verification passed), so there is nothing to verify again"
        raise ValueError(msg)
    # What the agent said last, from the checkpoint: after a declined wait, a claim of success fails.
    with built(run, host.limits_version, reading=True) as readable:
        final = final_message_of(readable.graph.get_state(graph_config(run)).values)
    attempt = f"re-{timezone.now().strftime('%Y%m%dT%H%M%S%f')}"
    result = verify(run.operation_id, hosted.verifier, attempt=attempt, final_message=final)
    writer.flush()  # the receipt is stored before the task reports the result
    if result is None:
        msg = "the run has no handoff to attach a verification to"
        raise ValueError(msg)
    return result


def has_verifier(run: Run) -> bool:
    """The run's graph has an outcome verifier.

    A verifier registered with the entry answers at once; otherwise the graph is
    built (without a checkpointer, nothing created) once per graph and scenario:
    pages ask this for every run they list.
    """
    _check_hosted(run)
    if registry.entry(run.graph).verifier is not None:
        return True
    key = (registry.setting_key(), run.graph, run.scenario)
    if key not in _VERIFIED_BY_FACTORY:
        host = Host(run=run, limits_version=_pinned(run), dry_run=run.dry_run, reading=True)
        _VERIFIED_BY_FACTORY[key] = _build(run, None, host).verifier is not None
    return _VERIFIED_BY_FACTORY[key]


# (SIDEWISP_GRAPHS, graph, scenario) -> whether its factory gives a verifier: a fact of the code, not of a run.
_VERIFIED_BY_FACTORY: dict[tuple[str, str, str], bool] = {}


def graph_config(run: Run) -> dict[str, Any]:
    configurable = {"thread_id": run.thread_id, "operation_id": run.operation_id}
    if run.scenario:
        configurable["scenario"] = run.scenario
    return {"configurable": configurable}


@contextmanager
def built(run: Run, version: LimitsVersion | None, *, reading: bool = False) -> Iterator[HostedGraph]:
    """The run's graph on Sidewisp's checkpointer, for as long as the checkpointer is open."""
    with checkpointer() as saver:
        yield _build(run, saver, Host(run=run, limits_version=version, dry_run=run.dry_run, reading=reading))


def _build(run: Run, saver: Any, host: Host) -> HostedGraph:
    try:
        entry = registry.entry(run.graph)
    except LookupError as exc:
        msg = f"run {run.operation_id}: {exc}"
        raise ValueError(msg) from None
    return entry.build(graph_config(run), checkpointer=saver, host=host)


def _check_hosted(run: Run) -> None:
    if run.mode != Run.Mode.HOSTED or not run.graph:
        msg = f"run {run.operation_id} is not a hosted run: no Sidewisp worker drives it"
        raise ValueError(msg)


def _in_flight(graph: Any, snapshot: Any) -> bool:
    """The checkpoint stopped mid-way: a step still to run, or one whose tasks all wrote (a worker killed
    after their writes were saved, before the step's checkpoint): `next` is empty then, but `tasks` are not,
    and streaming from the checkpoint applies those writes and goes on."""
    if snapshot.interrupts:
        return False
    if snapshot.next:
        return not _held(graph, snapshot.next)
    return bool(snapshot.tasks)


def _held(graph: Any, next_nodes: tuple[str, ...]) -> bool:
    # Stopped before nodes the graph holds (interrupt_before): nothing to continue until resumed.
    held = getattr(graph, "interrupt_before_nodes", ()) or ()
    return held == "*" or set(next_nodes) <= set(held)


def _pinned(run: Run) -> LimitsVersion | None:
    # Read, never pin: looking at a run must not choose its limits.
    pin = RunLimits.objects.select_related("version").filter(run=run).first()
    return pin.version if pin is not None else None


def _variant(run: Run) -> str:
    return f" (scenario {run.scenario!r})" if run.scenario else ""


def _observed(run: Run, graph: Any, graph_input: Any, config: dict[str, Any], **kwargs: Any) -> Outcome:
    """`observe` for a hosted run: a transient error escapes for a retry; any other ends the run failed.

    Durable: the run's evidence is stored before its task goes on (and ends) — the worker's time, not a user's.

    `observe` records a graph's failure on the run and either returns it as an outcome or raises the
    graph's exception (an observed app gets what its graph raised); here both end the same way.
    """
    try:
        return observe(graph, graph_input, config, retry_on=TRANSIENT, durable=True, **kwargs)
    except TRANSIENT:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded by observe; a hosted run's failure stays out of Celery
        return _failed(run, exc)


def _failed(run: Run, exc: Exception) -> Outcome:
    """End the run failed with the exception's class name (unless it has ended already); clear its input."""
    error = type(exc).__name__
    logger.warning("hosted run %s (graph %s) failed: %s", run.operation_id, run.graph, error)
    run.refresh_from_db(fields=["status", "input"])
    if run.status not in runs.ENDED:
        runs.set_status(run, Run.Status.FAILED, error=error)
    _clear_input(run)
    return Outcome("failed", error=error)


def _clear_input(run: Run) -> None:
    run.input = None
    Run.objects.filter(pk=run.pk).update(input=None)


def _say_if_unverified(run: Run, hosted: HostedGraph, outcome: Outcome) -> None:
    # Without a verifier a completion claim is never proven (FALSE_COMPLETE, spec §1): say why on the run.
    if hosted.verifier is None and outcome.status == "complete":
        detail = {"graph": run.graph}
        database.add_report(run.operation_id, OBSERVER, MiddlewareReport.Kind.NO_VERIFIER, detail, "graph")


def _finish(run: Run, outcome: Outcome) -> str:
    # observe/conclude set the run's status (receipts.ingest.runs.set_status); the runner only tidies up.
    status = _STATUS[outcome.status]
    if status == Run.Status.COMPLETE and workspaces.exists(run.operation_id) and _verified(run):
        # Kept when the run failed or its verification did not pass: an operator inspects it, and
        # reopening re-runs the verifier on it.
        workspaces.remove(run.operation_id)
    return str(status)


def _verified(run: Run) -> bool:
    handoff = database.latest_handoff(run.operation_id)
    return handoff is not None and (handoff.verification_part or {}).get("result") == "pass"
