"""Worker throughput: hosted runs through a real Celery worker, and where enqueue → start goes.

A Celery worker with 2 processes (prefork, as `make run` starts it, plus `-E`
for task events) serves this process's own queue on the Redis at REDIS_URL and
a throwaway test database. The healthy `healthy_purchase` demo scenario is
started the way the pages start it (`agents.host.hosting.start`: a queued Run and
an outbox intent, sent when the transaction commits): first a warm-up run per
worker process (each builds its graph once: agents.host.graphcache), then one run
alone, then a burst of 40 (quick: 6, tiny: 3) started as fast as one process
can. Throughput counts the runs the database holds complete, against the
ceiling of 2 processes ÷ the time a run holds one, measured in the same run.

Each run's start is split into its legs, from clocks on this machine:
enqueue → sent (the outbox's on-commit send), sent → received (the broker, and
waiting in the queue until a worker process may reserve it: prefetch 1, acks
late), received → task started (a free pool process), task started → the run
marked running (lease, pinned limits, the graph, once per process), running → finished.

    .venv-bench/bin/python -m bench.workers [--quick]
"""

from __future__ import annotations

import argparse
import ast
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bench import sizes
from bench.environment import ROOT, setup_django, throwaway_database
from bench.table import Row, markdown, versus

SCENARIO = "healthy_purchase"
CONCURRENCY = 2
START_TIMEOUT = 60.0


@dataclass
class Timeline:
    """Epoch seconds of one run's legs (None: not seen)."""

    enqueued: float
    sent: float | None = None
    received: float | None = None
    task_started: float | None = None
    running: float | None = None
    finished: float | None = None


@dataclass
class TaskEvents:
    """task-received / task-started times of our worker's start_run tasks, by run id."""

    hostname: str
    received: dict[int, float] = field(default_factory=dict)
    started: dict[int, float] = field(default_factory=dict)
    _run_of: dict[str, int] = field(default_factory=dict)

    def on_received(self, event: dict) -> None:
        if event.get("hostname") == self.hostname and event.get("name") == "agents.tasks.start_run":
            run_id = ast.literal_eval(event["args"])[0]
            self._run_of[event["uuid"]] = run_id
            self.received[run_id] = event["timestamp"]

    def on_started(self, event: dict) -> None:
        if (run_id := self._run_of.get(event.get("uuid"))) is not None:
            self.started[run_id] = event["timestamp"]


# --- the worker and its events ---------------------------------------------------------


@contextmanager
def worker_process(name: str) -> Iterator[str]:
    """A `celery worker -c 2 -E` on this process's queue and database; yields its hostname."""
    from sidewisp.celery import app
    from tests.conftest import database_url_for_subprocess

    hostname = f"{name}@{socket.gethostname()}"
    env = {**os.environ, "DATABASE_URL": database_url_for_subprocess(), "DEBUG": os.environ.get("DEBUG", "0")}
    command = [sys.executable, "-m", "celery", "-A", "sidewisp", "worker", "-c", str(CONCURRENCY)]
    command += ["-n", hostname, "-E", "-l", "WARNING", "--without-gossip", "--without-mingle"]
    # Its banner would land in the middle of the table: stdout is dropped, warnings stay on stderr.
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not app.control.ping(destination=[hostname], timeout=1.0):
            if process.poll() is not None or time.monotonic() > deadline:
                msg = f"the Celery worker did not answer within {START_TIMEOUT:.0f} s"
                raise RuntimeError(msg)
        yield hostname
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def task_events(hostname: str) -> Iterator[TaskEvents]:
    """Collects the worker's task events in a background thread while open."""
    from sidewisp.celery import app

    events = TaskEvents(hostname)
    ready = threading.Event()
    with app.connection_for_read() as connection:
        receiver = app.events.Receiver(
            connection, handlers={"task-received": events.on_received, "task-started": events.on_started}
        )
        announce = receiver.on_consume_ready

        def on_consume_ready(*args, **kwargs) -> None:
            announce(*args, **kwargs)
            ready.set()

        receiver.on_consume_ready = on_consume_ready
        thread = threading.Thread(target=receiver.capture, kwargs={"wakeup": False}, daemon=True)
        thread.start()
        ready.wait(10)
        try:
            yield events
        finally:
            receiver.should_stop = True
            thread.join(10)


# --- runs ----------------------------------------------------------------------------


def enqueue(count: int) -> dict[int, Timeline]:
    from agents.demo.scenarios import DEMO_GRAPH, SCENARIOS
    from agents.host.hosting import start

    graph_input = SCENARIOS[SCENARIO].graph_input()
    timelines = {}
    for _ in range(count):
        enqueued = time.time()
        run = start(DEMO_GRAPH, graph_input, scenario=SCENARIO)  # sent on commit, before it returns
        timelines[run.pk] = Timeline(enqueued=enqueued)
    return timelines


def wait_settled(timelines: dict[int, Timeline], timeout: float) -> None:
    from receipts.models import Run

    settled = [Run.Status.COMPLETE, Run.Status.FAILED, Run.Status.WAITING]
    deadline = time.monotonic() + timeout
    while Run.objects.filter(pk__in=timelines).exclude(status__in=settled).exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.1)


def fill_in(timelines: dict[int, Timeline], events: TaskEvents) -> None:
    from receipts.models import OutboxIntent, Run

    sent = dict(
        OutboxIntent.objects.filter(run__in=timelines, kind=OutboxIntent.Kind.START).values_list("run", "sent_at")
    )
    for pk, started, finished in Run.objects.filter(pk__in=timelines).values_list("pk", "started_at", "finished_at"):
        line = timelines[pk]
        line.sent = sent[pk].timestamp() if sent.get(pk) else None
        line.received = events.received.get(pk)
        line.task_started = events.started.get(pk)
        line.running = started.timestamp() if started else None
        line.finished = finished.timestamp() if finished else None


def outcome(timelines: dict[int, Timeline]) -> tuple[int, str]:
    """How many runs the database holds complete, and the sentence saying so with their verdicts."""
    from receipts.models import Handoff, Run

    runs = Run.objects.filter(pk__in=timelines)
    complete = runs.filter(status=Run.Status.COMPLETE).count()
    verdicts = sorted(set(Handoff.objects.filter(run__in=runs).values_list("verdict", flat=True)))
    return complete, f"{complete}/{len(timelines)} stored complete, verdicts {', '.join(verdicts) or 'none'}"


# --- figures -------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _leg(timelines: dict[int, Timeline], start: str, end: str) -> list[float]:
    legs = []
    for line in timelines.values():
        a, b = getattr(line, start), getattr(line, end)
        if a is not None and b is not None:
            legs.append(b - a)
    return legs


def _ms(values: list[float]) -> str:
    if not values:
        return "not seen"
    return f"p50 {statistics.median(values) * 1000:.0f} ms"


def _seconds(values: list[float]) -> str:
    if not values:
        return "not seen"
    if len(values) == 1:
        return f"{values[0]:.2f} s"
    return f"p50 {statistics.median(values):.2f} s, p95 {_percentile(values, 0.95):.2f} s"


def legs_note(timelines: dict[int, Timeline]) -> str:
    legs = [
        ("enqueue → sent (outbox on commit)", "enqueued", "sent"),
        ("sent → received (broker + queued behind prefetch 1)", "sent", "received"),
        ("received → task started (free pool process)", "received", "task_started"),
        ("task started → run running (lease, pinned limits, the graph)", "task_started", "running"),
        ("running → finished", "running", "finished"),
    ]
    return "; ".join(f"{label} {_ms(_leg(timelines, a, b))}" for label, a, b in legs)


def rows(quick: bool) -> list[Row]:
    setup_django()
    burst = sizes.pick(quick, tiny=3, quick=6, full=40)
    with throwaway_database(), worker_process(f"bench-{os.getpid()}") as hostname, task_events(hostname) as events:
        from agents.demo.contracts import install_team_contracts

        install_team_contracts()
        # One run per worker process first: each builds its graph once (agents.host.graphcache), as a warm worker has.
        warmup = enqueue(sizes.pick(quick, tiny=1, quick=CONCURRENCY, full=CONCURRENCY))
        wait_settled(warmup, timeout=120)
        alone = enqueue(1)
        wait_settled(alone, timeout=120)
        timelines = enqueue(burst)
        wait_settled(timelines, timeout=60 + burst * 10)
        time.sleep(0.5)  # the last task events
        fill_in(alone, events)
        fill_in(timelines, events)
        complete, result = outcome(timelines)
        build = _graph_build_row(sizes.pick(quick, tiny=2, quick=5, full=20))
    return [
        _throughput_row(timelines, burst, complete, result),
        _burst_row(timelines, burst),
        Row(
            "workers",
            "enqueue → run running, one run alone",
            _seconds(_leg(alone, "enqueued", "running")),
            "report",
            legs_note(alone),
        ),
        build,
    ]


def _graph_build_row(repeats: int) -> Row:
    """A run's graph built by its factory (a cold worker process) against the one kept for its limits version."""
    from agents.demo.scenarios import create_run
    from agents.host import graphcache, registry, runner
    from agents.host.checkpoints import checkpointer
    from agents.models import RunLimits

    run = create_run(SCENARIO)
    version = RunLimits.pin(run)
    cold, kept = [], []
    for _ in range(repeats + 1):  # the first, which imports the graph's modules, is not counted
        graphcache.forget()
        for samples in (cold, kept):
            with checkpointer() as saver:
                started = time.perf_counter()
                host = registry.Host(run=run, limits_version=version, dry_run=run.dry_run)
                registry.entry(run.graph).build(runner.graph_config(run), checkpointer=saver, host=host)
                samples.append(time.perf_counter() - started)
    cold_ms, kept_ms = statistics.median(cold[1:]) * 1000, statistics.median(kept[1:]) * 1000
    return Row(
        "workers",
        f"building the {SCENARIO} graph for a run, kept per worker process and limits version",
        f"p50 {kept_ms:.1f} ms",
        versus(kept_ms, cold_ms, f"building it with its factory ({cold_ms:.0f} ms, a cold process)"),
        f"median of {repeats}, in this process, checkpointer opened outside the clock (agents.host.graphcache); "
        "a kept graph also runs faster (its lazy first-invoke work is done once): the hold time shows the rest",
    )


def _held(timelines: dict[int, Timeline]) -> float:
    """The median time a run holds a pool process (task started → finished), in seconds; nan when none."""
    held = _leg(timelines, "task_started", "finished")
    return statistics.median(held) if held else float("nan")


def _throughput_row(timelines: dict[int, Timeline], burst: int, complete: int, result: str) -> Row:
    span = max((t.finished or 0) for t in timelines.values()) - min(t.enqueued for t in timelines.values())
    per_minute = complete / span * 60 if span > 0 else 0.0
    ceiling = CONCURRENCY * 60 / _held(timelines)
    return Row(
        "workers",
        f"worker throughput, {SCENARIO} hosted, {CONCURRENCY} worker processes, {burst}-run burst",
        f"{per_minute:.0f} runs/min stored complete" if span > 0 else "no run finished",
        versus(per_minute, ceiling, f"the ceiling {CONCURRENCY} processes ÷ hold time = {ceiling:.0f} runs/min"),
        f"{result}; a run takes {_ms(_leg(timelines, 'running', 'finished'))} once running and holds a process "
        f"{_ms(_leg(timelines, 'task_started', 'finished'))}; graphs built once per worker process per limits version",
    )


def _burst_row(timelines: dict[int, Timeline], burst: int) -> Row:
    # Run k of the burst waits for the k // 2 runs ahead of it to leave a pool process.
    expected = (burst - 1) / 2 / CONCURRENCY * _held(timelines)
    waits = _leg(timelines, "enqueued", "running")
    return Row(
        "workers",
        f"enqueue → run running, {burst}-run burst",
        _seconds(waits),
        versus(statistics.median(waits) if waits else float("nan"), expected, "the queueing model's median")
        + f" ({expected:.2f} s)",
        f"{legs_note(timelines)}. The queueing model: half the burst ahead, {CONCURRENCY} at a time, each holding "
        f"a process for {_ms(_leg(timelines, 'task_started', 'finished'))}; beat is not on the path (the outbox "
        "sends on commit; its sweep only retries a failed send)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 6-run burst instead of 40")
    parser.add_argument("--tiny", action="store_true", help="a 3-run burst: it runs, its figures mean nothing")
    args = parser.parse_args()
    if args.tiny:
        sizes.use(sizes.TINY)
    print(markdown(rows(args.quick)))


if __name__ == "__main__":
    main()
