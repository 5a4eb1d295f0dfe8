"""What a run's task does with an exception: retry a lost connection, fail the run otherwise; the stall sweep."""

from __future__ import annotations

from datetime import timedelta
from unittest import mock

import pytest
from django.db import OperationalError
from django.utils import timezone

from agents import tasks
from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import execution, runner
from receipts.ingest import runs
from receipts.models import Decision, Handoff, Run

# Transactional: a lost connection is closed before the retry, which a test transaction would not survive.
pytestmark = pytest.mark.django_db(transaction=True)


class GraphExploded(Exception):
    pass


@pytest.fixture(autouse=True)
def contracts(transactional_db):
    install_team_contracts()


def _run(run: Run) -> Run:
    return Run.objects.get(pk=run.pk)


def test_an_unexpected_error_fails_the_run_with_its_class_name_only():
    run = create_run("healthy_purchase")
    with mock.patch.object(runner, "start_run", side_effect=GraphExploded("secret detail")) as drive:
        with pytest.raises(GraphExploded):
            tasks.start_run.apply(args=(run.pk,), throw=True)
    assert drive.call_count == 1
    run = _run(run)
    assert (run.status, run.error) == (Run.Status.FAILED, "GraphExploded")
    assert run.finished_at is not None
    assert run.lease_owner == ""


def test_a_lost_database_connection_is_retried_and_the_run_completes():
    run = create_run("healthy_purchase")
    outcomes = iter([OperationalError("terminated"), runner.start_run])

    def drive_once(run):
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome(run)

    with mock.patch.object(runner, "start_run", side_effect=drive_once) as drive:
        tasks.start_run.apply(args=(run.pk,))
    assert drive.call_count == 2
    run = _run(run)
    assert (run.status, run.error, run.deliveries) == (Run.Status.COMPLETE, "", 2)


def test_a_lost_connection_on_every_delivery_fails_the_run_at_the_delivery_limit():
    run = create_run("healthy_purchase")
    with mock.patch.object(runner, "start_run", side_effect=OperationalError("terminated")) as drive:
        tasks.start_run.apply(args=(run.pk,))
    assert drive.call_count == execution.MAX_DELIVERIES
    run = _run(run)
    assert (run.status, run.error) == (Run.Status.FAILED, "OperationalError")


def test_a_resume_that_raises_fails_its_waiting_run():
    run = create_run("waiting_on_approval")
    tasks.start_run.apply(args=(run.pk,))
    assert _run(run).status == Run.Status.WAITING
    handoff = Handoff.objects.get(run=run, wait_open=True)
    decision = Decision.objects.create(
        run=run, handoff=handoff, resume_token_id=handoff.wait_part["resume_token_id"], kind=Decision.Kind.APPROVE
    )
    with mock.patch.object(runner, "resume_run", side_effect=GraphExploded):
        tasks.resume_run.apply(args=(decision.pk,))
    assert (_run(run).status, _run(run).error) == (Run.Status.FAILED, "GraphExploded")


def test_an_error_after_the_run_completed_leaves_it_complete():
    run = create_run("healthy_purchase")
    tasks.start_run.apply(args=(run.pk,))
    with mock.patch.object(runner, "reverify", side_effect=GraphExploded):
        tasks.reverify.apply(args=(run.pk,))
    assert _run(run).status == Run.Status.COMPLETE


# --- observe raising what the graph raised (an observed app gets it; a hosted run ends in the run) -------


def _raising_after_recording(exc: Exception):
    """`observe` as it behaves when it re-raises the graph's exception after recording the run as failed."""

    def observe(graph, graph_input, config, **kwargs):
        run = Run.objects.get(operation_id=config["configurable"]["operation_id"])
        runs.set_status(run, Run.Status.FAILED, error=type(exc).__name__)
        raise exc

    return observe


def test_a_graph_exception_that_observe_raises_fails_the_run_without_reaching_celery():
    run = create_run("healthy_purchase")

    with mock.patch.object(runner, "observe", side_effect=_raising_after_recording(GraphExploded("secret detail"))):
        result = tasks.start_run.apply(args=(run.pk,), throw=True)

    assert result.get() == Run.Status.FAILED
    assert (_run(run).status, _run(run).error, _run(run).input) == (Run.Status.FAILED, "GraphExploded", None)


def test_a_graph_exception_raised_before_observe_recorded_it_still_fails_the_run():
    run = create_run("healthy_purchase")

    with mock.patch.object(runner, "observe", side_effect=GraphExploded("secret detail")):
        assert tasks.start_run.apply(args=(run.pk,), throw=True).get() == Run.Status.FAILED

    assert (_run(run).status, _run(run).error, _run(run).input) == (Run.Status.FAILED, "GraphExploded", None)


def test_a_resumed_graph_exception_that_observe_raises_fails_the_waiting_run():
    run = create_run("waiting_on_approval")
    tasks.start_run.apply(args=(run.pk,))
    handoff = Handoff.objects.get(run=run, wait_open=True)
    decision = Decision.objects.create(
        run=run, handoff=handoff, resume_token_id=handoff.wait_part["resume_token_id"], kind=Decision.Kind.APPROVE
    )

    with mock.patch.object(runner, "observe", side_effect=_raising_after_recording(GraphExploded("secret"))):
        tasks.resume_run.apply(args=(decision.pk,), throw=True)

    assert (_run(run).status, _run(run).error) == (Run.Status.FAILED, "GraphExploded")


def test_a_lost_connection_that_observe_raises_is_still_retried_and_the_run_completes():
    from agents.observe.observer import observe

    run = create_run("healthy_purchase")
    failures = iter([OperationalError("terminated")])

    def flaky(*args, **kwargs):
        if (exc := next(failures, None)) is not None:
            raise exc
        return observe(*args, **kwargs)

    with mock.patch.object(runner, "observe", side_effect=flaky) as observed:
        tasks.start_run.apply(args=(run.pk,))

    assert observed.call_count == 2
    assert (_run(run).status, _run(run).error, _run(run).deliveries) == (Run.Status.COMPLETE, "", 2)


def test_a_graph_that_fails_while_it_is_built_fails_the_run_and_clears_its_input():
    run = create_run("healthy_purchase")
    assert _run(run).input is not None

    with mock.patch.object(runner, "_build", side_effect=GraphExploded("cannot import the graph")):
        assert tasks.start_run.apply(args=(run.pk,), throw=True).get() == Run.Status.FAILED

    assert (_run(run).status, _run(run).error, _run(run).input) == (Run.Status.FAILED, "GraphExploded", None)


def test_every_ending_clears_the_input_but_a_park_keeps_it():
    ended = {status: create_run("healthy_purchase") for status in (Run.Status.COMPLETE, Run.Status.WAITING)}
    parked = create_run("healthy_purchase")

    for status, run in ended.items():
        runs.set_status(run, status)
    runs.set_status(parked, Run.Status.PARKED)

    assert [_run(run).input for run in ended.values()] == [None, None]
    assert _run(parked).input is not None


# --- the stall sweep -------------------------------------------------------------


def _stalled(run: Run, *, status: str = Run.Status.RUNNING, ago: timedelta) -> Run:
    then = timezone.now() - ago
    Run.objects.filter(pk=run.pk).update(status=status, heartbeat_at=then, lease_owner="gone", lease_until=then)
    return _run(run)


def test_the_sweep_restarts_a_running_run_whose_worker_vanished():
    run = _stalled(create_run("healthy_purchase"), ago=timedelta(minutes=5))
    with mock.patch.object(tasks.start_run, "delay") as enqueue:
        assert execution.take_over_stalled() == 1
    enqueue.assert_called_once_with(run.pk)


def test_the_sweep_takes_a_stalled_run_over_once():
    _stalled(create_run("healthy_purchase"), ago=timedelta(minutes=5))
    with mock.patch.object(tasks.start_run, "delay") as enqueue:
        execution.take_over_stalled()
        execution.take_over_stalled()
    assert enqueue.call_count == 1


def test_the_sweep_leaves_a_run_whose_lease_is_renewed():
    run = create_run("healthy_purchase")
    soon = timezone.now() + timedelta(seconds=20)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.RUNNING, heartbeat_at=timezone.now(), lease_until=soon)
    with mock.patch.object(tasks.start_run, "delay") as enqueue:
        assert execution.take_over_stalled() == 0
    enqueue.assert_not_called()


def test_the_sweep_gives_a_dead_workers_task_time_to_come_back_from_the_broker():
    _stalled(create_run("healthy_purchase"), ago=timedelta(seconds=10))  # lease expired, heartbeat recent
    with mock.patch.object(tasks.start_run, "delay") as enqueue:
        assert execution.take_over_stalled() == 0
    enqueue.assert_not_called()


def test_the_sweep_restarts_a_run_queued_for_long_but_not_one_just_queued():
    old = create_run("healthy_purchase")
    Run.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(hours=1))
    create_run("healthy_support")
    with mock.patch.object(tasks.start_run, "delay") as enqueue:
        assert execution.take_over_stalled() == 1
    enqueue.assert_called_once_with(old.pk)


def test_the_sweep_fails_a_run_that_keeps_stalling():
    run = _stalled(create_run("healthy_purchase"), ago=timedelta(minutes=5))
    Run.objects.filter(pk=run.pk).update(deliveries=execution.MAX_DELIVERIES)
    with mock.patch.object(tasks.start_run, "delay", side_effect=lambda pk: tasks.start_run.apply(args=(pk,))):
        execution.take_over_stalled()
    assert (_run(run).status, _run(run).error) == (Run.Status.FAILED, "TooManyDeliveries")


def _flaky_graph(failures: list[int]):
    """One node that loses its database connection on its first `failures[0]` attempts."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    def node(state):
        if failures[0]:
            failures[0] -= 1
            raise OperationalError("server closed the connection unexpectedly")
        return {"messages": [{"role": "assistant", "content": "done"}]}

    builder = StateGraph(MessagesState)
    builder.add_node("work", node)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    return builder.compile(checkpointer=InMemorySaver())


def test_a_lost_connection_inside_the_graph_escapes_observe_for_a_retry_when_asked():
    from agents.observe.transient import TRANSIENT
    from tests.agents.stored import observe

    graph, config = _flaky_graph([1]), {"configurable": {"thread_id": "th-flaky", "operation_id": "op-flaky"}}
    with pytest.raises(OperationalError):
        observe(graph, {"messages": [{"role": "user", "content": "go"}]}, config, retry_on=TRANSIENT)
    # Never left running: queued again, a retry expected, with the class name.
    run = Run.objects.get(operation_id="op-flaky")
    assert (run.status, run.error) == (Run.Status.QUEUED, "OperationalError")

    outcome = observe(graph, None, config, retry_on=TRANSIENT)
    assert graph.get_state(config).values["messages"][-1].content == "done"
    assert (outcome.status, Run.objects.get(operation_id="op-flaky").status) == ("complete", Run.Status.COMPLETE)


def test_without_retry_on_a_lost_connection_inside_the_graph_fails_the_observed_run():
    from tests.agents.stored import observe

    graph, config = _flaky_graph([1]), {"configurable": {"thread_id": "th-flaky2", "operation_id": "op-flaky2"}}
    with pytest.raises(OperationalError):
        observe(graph, {"messages": [{"role": "user", "content": "go"}]}, config)
    run = Run.objects.get(operation_id="op-flaky2")
    assert (run.status, run.error) == (Run.Status.FAILED, "OperationalError")


@pytest.mark.parametrize(
    ("task", "pk"), [(tasks.start_run, 987654), (tasks.reverify, 987654), (tasks.resume_run, 987654)]
)
def test_a_task_naming_a_row_this_database_does_not_have_is_dropped_with_a_log_line(task, pk, caplog):
    # A stale message in a shared queue (seen with `make run` on a fresh database) must not raise or retry.
    result = task.apply(args=(pk,), throw=True)

    assert result.get() == execution.MISSING
    assert "which this database does not have" in caplog.text
    assert not Run.objects.filter(pk=pk).exists()
