"""A worker killed at any receipt boundary of a two-handoff hosted run leaves the verdicts an uninterrupted run gets.

The run (tests/faults/two_handoffs_graph.py: intake → analyst → reporter) is driven by a real prefork Celery
worker with acks_late. `SIDEWISP_FAULT_KILL` (agents/faults.py) makes the pool process that drives it SIGKILL
itself at one boundary, once: as a receipt is handed to the evidence writer (`submitted`) or right after the
batch holding it committed (`stored`). The worker's main process sees its child lost and puts the task back
at once (reject_on_worker_lost); a new child waits out the dead one's lease and resumes the run from its
checkpoint. Each case then compares what an operator sees with an uninterrupted run: each handoff's verdict,
the run's status and health, its reports, and whether an alert on non-healthy handoffs would fire.

A `submitted` kill is exact (it runs on the graph's own thread). A `stored` kill runs on the writer's thread:
the graph goes on for the moment the batch takes to commit, so the checkpoint may be a little further on
when the process dies, and a case can land in a slightly different place from one run to the next.

Each case starts its own worker (the kill point is its environment) and costs about the worker's start-up
plus the lease of the killed child (`SIDEWISP_LEASE_SECONDS=3`, the smallest the settings allow).

`make test-faults` runs each case `SIDEWISP_FAULT_REPEAT` times while `SIDEWISP_FAULT_LOAD` busy processes
keep the CPU loaded (both unset in `make test`: each case once, unloaded): a race between the graph's
threads, the checkpointer's and the evidence writer's that shows once in ten runs of a case shows there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.utils import timezone

from agents.demo.contracts import team_contracts
from agents.host import hosting
from agents.models import Order
from receipts.ingest import runs
from receipts.ingest.contracts import import_document
from receipts.models import AlertRule, NotificationChannel, Run
from receipts.notify import alerts
from tests.conftest import start_worker_process, wait_until
from tests.faults.two_handoffs_graph import CONTRACTS, INPUT, REPORT_SKU

pytestmark = [pytest.mark.faults, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

GRAPH = "two_handoffs"
GRAPHS = json.dumps(
    {
        # The default limits name the demo's exception classes (issue 18 item 8): registered beside ours.
        "demo": "agents.demo.graph:make_graph",
        GRAPH: {
            "graph": "tests/faults/two_handoffs_graph.py:make_graph",
            "verifier": "tests/faults/two_handoffs_graph.py:report_filed",
        },
    }
)
BOUNDARIES = [
    *(
        f"{when}:{part}:{n}"
        for when in ("submitted", "stored")
        for n in (1, 2)
        for part in ("created", "reduced", "destination")
    ),
    "stored:verification:1",
    "stored:final_status:1",
]


def _count(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip() or str(default)
    if not value.isdigit():
        msg = f"{name} must be a whole number (got {value!r})"
        raise ValueError(msg)
    return int(value)


REPEAT = max(_count("SIDEWISP_FAULT_REPEAT", 1), 1)
LOAD = _count("SIDEWISP_FAULT_LOAD", 0)
CASES = [(boundary, n) for boundary in BOUNDARIES for n in range(1, REPEAT + 1)]
# The run's last receipts and its end are handed to the evidence writer together (issue 20): a batch that
# stored these parts usually stored the run's end too, and a kill after it finds the run complete.
AFTER_THE_END = ("stored:verification:1", "stored:final_status:1")


@dataclass(frozen=True)
class Seen:
    """What an operator sees of a run once it ended."""

    handoffs: tuple[tuple[str, str, str], ...]  # (sender, receiver, verdict) in the order they happened
    status: str
    health: str
    reports: tuple[tuple[str, str], ...]  # (agent, kind)
    alerting: bool  # a rule on any non-healthy handoff would fire
    reports_filed: int


UNINTERRUPTED = Seen(
    handoffs=(("intake", "analyst", "HEALTHY"), ("analyst", "reporter", "HEALTHY")),
    status=Run.Status.COMPLETE,
    health="healthy",
    reports=(),  # no report of anything going wrong (a timed tool call is no such report: see `timed_calls`)
    alerting=False,
    reports_filed=1,
)


@pytest.fixture(autouse=True)
def case_contracts(transactional_db, settings):
    document = team_contracts()
    import_document({**document, "routes": {**document["routes"], **CONTRACTS}})
    settings.SIDEWISP_GRAPHS = GRAPHS


@pytest.fixture(scope="module", autouse=True)
def cpu_load() -> Iterator[None]:
    """`SIDEWISP_FAULT_LOAD` processes that keep a CPU busy each, for the module's cases (none by default)."""
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(LOAD)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture
def problem_alert(transactional_db) -> AlertRule:
    """Ops' rule on any non-healthy handoff; inactive, so the runs promise no deliveries: the test asks it."""
    channel = NotificationChannel.objects.create(
        name="ops", kind=NotificationChannel.Kind.WEBHOOK, url="http://127.0.0.1:9/hook", secret="s3cret-for-tests"
    )
    return AlertRule.objects.create(
        name="any problem", kind=AlertRule.Kind.WINDOW, threshold=0, window_minutes=60, channel=channel, active=False
    )


def drive(celery_isolation: str, extra_env: dict[str, str] | None = None, *, until=None) -> Run:
    """Start the graph's run on a worker of its own and return it once it ended (after `until` held)."""
    worker = start_worker_process(
        f"kill{uuid.uuid4().hex[:6]}",
        celery_isolation,
        concurrency=1,
        pool="prefork",
        extra_env={"SIDEWISP_GRAPHS": GRAPHS, "SIDEWISP_LEASE_SECONDS": "3", **(extra_env or {})},
    )
    try:
        run = hosting.start(GRAPH, INPUT)
        if until is not None:
            wait_until(until, what="the worker to be killed at its boundary", timeout=60)
        ended = lambda: Run.objects.filter(pk=run.pk, status__in=runs.ENDED).exists()  # noqa: E731
        wait_until(ended, what="the run to end", timeout=60)
    finally:
        worker.stop()
    return Run.objects.get(pk=run.pk)


TOOL_CALL = "tool_call"


def timed_calls(run: Run) -> list[tuple[str, str]]:
    """The run's timed tool calls (issue 30 §1): the reporter's one call at most once. A kill -9 between the tool's
    return and the writer's next batch loses its timing (held in memory, and not rebuilt from the checkpoint as the
    receipts are): so at most once, never twice."""
    return list(run.reports.filter(kind=TOOL_CALL).values_list("agent", "attempt"))


def seen(run: Run, rule: AlertRule) -> Seen:
    handoffs = run.handoffs.order_by("created_at", "pk").values_list("sender", "receiver", "verdict")
    return Seen(
        handoffs=tuple(handoffs),
        status=run.status,
        health=run.health,
        reports=tuple(run.reports.exclude(kind=TOOL_CALL).order_by("pk").values_list("agent", "kind")),
        alerting=alerts.condition_of(rule, timezone.now()).holds,
        reports_filed=Order.objects.filter(operation_id=run.operation_id, sku=REPORT_SKU).count(),
    )


def diagnosis(run: Run) -> str:
    """Why the run differs, in names and codes: its error, and each handoff's verdict reason and receipts."""
    lines = [f"error={run.error or '-'}"]
    for h in run.handoffs.order_by("created_at", "pk"):
        parts = ",".join(f"{r.part}@{r.attempt}" for r in h.receipts.order_by("pk"))
        route = (h.created_part or {}).get("route_version")
        lines.append(f"{h.sender}->{h.receiver} {h.verdict} ({h.reason}) route={route} receipts={parts}")
    return "; ".join(lines)


def test_an_uninterrupted_two_handoff_run_is_healthy_and_complete(celery_isolation, problem_alert):
    run = drive(celery_isolation)

    assert seen(run, problem_alert) == UNINTERRUPTED
    assert len(timed_calls(run)) == 1 and timed_calls(run)[0][0] == "reporter"
    assert run.deliveries == 1


@pytest.mark.parametrize(
    ("boundary", "repeat"),
    CASES,
    ids=[b.replace(":", "-") + (f"-x{n}" if REPEAT > 1 else "") for b, n in CASES],
)
def test_a_run_whose_worker_is_killed_at_a_receipt_boundary_ends_as_an_uninterrupted_run(
    celery_isolation, problem_alert, tmp_path, boundary, repeat
):
    once = tmp_path / "killed"
    env = {"SIDEWISP_FAULT_KILL": boundary, "SIDEWISP_FAULT_ONCE_FILE": str(once)}

    run = drive(celery_isolation, env, until=once.exists)

    print(f"\n{boundary}: {seen(run, problem_alert)} after {run.deliveries} deliveries; {diagnosis(run)}")
    assert seen(run, problem_alert) == UNINTERRUPTED
    assert len(timed_calls(run)) <= 1
    killed = once.read_text()
    assert killed.startswith(boundary)
    # The writer gathers a quick run's entries into one batch: a kill after the batch holding the boundary's part
    # may come after the run's end too (the once file names the batch's parts).
    stored_the_end = boundary in AFTER_THE_END or "final_status" in killed.split("held=", 1)[-1].strip().split(",")
    if stored_the_end and run.deliveries == 1:
        return  # killed right after the batch that stored the run's end: nothing was left to deliver again
    assert run.deliveries == 2  # killed in its first delivery, ended in the second
