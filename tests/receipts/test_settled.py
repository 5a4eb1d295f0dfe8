"""Settled verdicts (spec v1.2): "not yet" is in progress, never a failure, until no more evidence is due.

A failing verdict whose due part has not arrived (STALE_CONTROL without `reduced`, DESTINATION_NOT_STARTED
without `destination`) is in progress until its handoff settles: a settle entry, or the end of its run.
Alert rules, exported error spans and the run's problem counts act on settled verdicts only.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from receipts.ingest import health, intake, recording, runs
from receipts.ingest.broadcast import HEALTH_GROUP
from receipts.models import AlertRule, Delivery, Handoff, NotificationChannel, Run, VerdictChange
from receipts.notify import alerts, traces
from receipts.notify.alerts import FIRED
from receipts.verdicts import bundle
from tests.conftest import handoff_parts

pytestmark = pytest.mark.django_db

OP = "op-settle"


@pytest.fixture
def parts(contracts) -> dict[str, object]:
    """The receipts of a healthy triage → sales handoff, by part (the demo team's contracts installed)."""
    return dict(handoff_parts("healthy"))


def receive(part: str, value: object, handoff_id: str = "h-1", operation_id: str = OP) -> Handoff:
    return recording.record(handoff_id=handoff_id, operation_id=operation_id, part=part, value=value).handoff


def settle(handoff_id: str = "h-1", operation_id: str = OP) -> list[bool]:
    return intake.apply([intake.SettleEntry(operation_id, handoff_id)])


def settle_committed(handoff_id: str = "h-1", operation_id: str = OP) -> list[bool]:
    """A settle as the writer and the API apply it: in a transaction of its own, announced once it commits."""
    with transaction.atomic():
        return settle(handoff_id, operation_id)


def fresh(handoff_id: str = "h-1") -> Handoff:
    return Handoff.objects.select_related("run").get(handoff_id=handoff_id)


@pytest.fixture
def stale_rule(db) -> AlertRule:
    channel = NotificationChannel.objects.create(
        name="oncall", kind=NotificationChannel.Kind.WEBHOOK, url="http://127.0.0.1:9/hook", secret="s3cret-for-tests"
    )
    return AlertRule.objects.create(name="stale control", kind="verdict", verdict="STALE_CONTROL", channel=channel)


def fired() -> list[str]:
    return [d.payload["handoff_id"] for d in Delivery.objects.filter(event=FIRED).order_by("pk")]


# --- the one rule ----------------------------------------------------------------------------


def test_a_handoff_whose_reduced_receipt_has_not_arrived_is_in_progress(parts):
    handoff = receive("created", parts["created"])

    assert (handoff.verdict, health.due_part(handoff)) == ("STALE_CONTROL", "reduced")


def test_a_handoff_whose_destination_has_not_started_is_in_progress(parts):
    receive("created", parts["created"])
    handoff = receive("reduced", parts["reduced"])

    assert (handoff.verdict, health.due_part(handoff)) == ("DESTINATION_NOT_STARTED", "destination")


def test_evidence_that_is_present_and_wrong_is_final_at_once(parts):
    receive("created", parts["created"])
    handoff = receive("reduced", {**parts["reduced"], "active_agent_after": "triage"})

    assert (handoff.verdict, health.due_part(handoff)) == ("STALE_CONTROL", None)


def test_a_settled_handoff_is_never_in_progress(parts):
    receive("created", parts["created"])
    settle()

    assert (fresh().verdict, health.due_part(fresh())) == ("STALE_CONTROL", None)


@pytest.mark.parametrize("settled", [False, True])
@pytest.mark.parametrize(
    ("verdict", "present"),
    [
        ("STALE_CONTROL", {}),
        ("STALE_CONTROL", {"reduced_part": {"goto": "sales"}}),
        ("DESTINATION_NOT_STARTED", {"reduced_part": {"goto": "sales"}}),
        ("DESTINATION_NOT_STARTED", {"destination_part": {"node_id": "billing"}}),
        ("UNCERTAIN", {"final_status": "waiting", "wait_part": {"resolved": True}}),
        ("UNCERTAIN", {"final_status": "waiting", "wait_part": {"resolved": False}, "wait_open": True}),
        ("UNCERTAIN", {"final_status": "waiting"}),
        ("ROUTE_REJECTED", {}),
        ("HEALTHY", {}),
    ],
)
def test_the_rule_in_sql_says_what_the_rule_in_python_says(verdict, present, settled):
    run = Run.objects.create(operation_id="op-q", thread_id="op-q")
    settled_at = timezone.now() if settled else None
    handoff = Handoff.objects.create(handoff_id="h-q", run=run, verdict=verdict, settled_at=settled_at, **present)

    in_sql = Handoff.objects.filter(health.due_condition()).filter(pk=handoff.pk).exists()

    assert in_sql == (health.due_part(handoff) is not None)


# --- settle entries ----------------------------------------------------------------------------


def test_a_settle_entry_reads_back_from_its_json():
    entry = intake.SettleEntry("op-1", "h-1")

    assert intake.to_json(entry) == {"kind": "settle", "operation_id": "op-1", "handoff_id": "h-1"}
    assert intake.parse(intake.to_json(entry)) == entry


def test_a_settle_entry_without_a_handoff_id_is_refused_naming_the_field():
    with pytest.raises(bundle.BundleError) as refused:
        intake.parse_many([{"kind": "settle", "operation_id": "op-1"}])

    assert refused.value.field == "entries[0].handoff_id"


def test_settling_twice_stores_once(parts):
    receive("created", parts["created"])

    assert (settle(), settle()) == ([True], [False])
    assert VerdictChange.objects.filter(cause=recording.SETTLED).count() == 1


def test_a_settle_for_a_handoff_not_recorded_yet_stores_and_creates_nothing(parts):
    assert settle("h-unknown", "op-unknown") == [False]
    assert not Run.objects.filter(operation_id="op-unknown").exists()
    assert not Handoff.objects.filter(handoff_id="h-unknown").exists()


def test_a_settle_naming_another_operation_is_refused(parts):
    receive("created", parts["created"])
    Run.objects.create(operation_id="op-other", thread_id="op-other")

    with pytest.raises(bundle.BundleError) as refused:
        recording.settle(handoff_id="h-1", operation_id="op-other")

    assert refused.value.field == "operation_id"
    assert fresh().settled_at is None


def test_settling_a_handoff_with_nothing_due_keeps_its_time_and_changes_nothing_shown(parts):
    for part in ("created", "reduced", "destination"):
        handoff = receive(part, parts[part])

    settle()

    assert fresh().settled_at is not None
    assert (fresh().verdict, fresh().updated_at) == ("HEALTHY", handoff.updated_at)
    assert not VerdictChange.objects.filter(cause=recording.SETTLED).exists()


# --- alert rules act on settled verdicts ---------------------------------------------------------


def test_the_stale_control_rule_does_not_fire_when_reduced_arrives_within_its_step(parts, stale_rule):
    receive("created", parts["created"])
    receive("reduced", parts["reduced"])
    settle()
    alerts.evaluate_all()

    assert fired() == []
    assert fresh().verdict == "DESTINATION_NOT_STARTED"  # settled without its destination: that is its verdict


def test_the_stale_control_rule_fires_once_when_reduced_never_arrives(parts, stale_rule):
    receive("created", parts["created"])
    alerts.evaluate_all()
    before_settling = fired()

    settle()
    alerts.evaluate_all()

    assert before_settling == []
    assert fired() == ["h-1"]


def test_the_stale_control_rule_fires_once_when_the_run_ends_without_reduced(parts, stale_rule):
    receive("created", parts["created"])
    alerts.evaluate_all()
    before_the_end = fired()

    runs.set_status(fresh().run, Run.Status.COMPLETE)
    alerts.evaluate_all()

    assert before_the_end == []
    assert fired() == ["h-1"]
    assert fresh().settled_at is not None


def test_a_handoff_that_turns_healthy_before_it_settles_never_fires(parts, stale_rule):
    window = AlertRule.objects.create(name="any problem", kind="window", channel=stale_rule.channel)
    for part in ("created", "reduced", "destination"):
        receive(part, parts[part])
    alerts.evaluate_all()
    settle()
    runs.set_status(fresh().run, Run.Status.COMPLETE)
    alerts.evaluate_all()

    assert fired() == []
    assert not AlertRule.objects.filter(pk__in=[stale_rule.pk, window.pk], firing=True).exists()


def test_a_stale_control_on_wrong_evidence_fires_at_once(parts, stale_rule):
    receive("created", parts["created"])
    receive("reduced", {**parts["reduced"], "active_agent_after": "triage"})

    assert fired() == ["h-1"]


# --- the run's health and summary --------------------------------------------------------------


def test_a_run_with_a_handoff_in_progress_is_in_progress_with_the_part_named(parts):
    receive("created", parts["created"])

    run = Run.objects.get(operation_id=OP)
    assert run.health == health.IN_PROGRESS
    assert {r["level"] for r in run.health_reasons} == {health.IN_PROGRESS}
    assert "Handoff in progress — waiting for the reduced receipt" in [r["text"] for r in run.health_reasons]
    assert (run.problem_count, health.split_latest(run.latest_verdict)) == (0, ("STALE_CONTROL", "reduced"))


def test_once_settled_the_run_shows_the_real_verdict_and_counts_the_problem(parts):
    receive("created", parts["created"])
    settle()

    run = Run.objects.get(operation_id=OP)
    assert run.health == health.FAILING
    assert "Handoff stale control" in [r["text"] for r in run.health_reasons]
    assert (run.problem_count, run.latest_verdict) == (1, "STALE_CONTROL")


def test_the_end_of_a_run_settles_all_its_handoffs_in_one_update(parts):
    receive("created", parts["created"], "h-1")
    for part in ("created", "reduced", "destination"):
        receive(part, parts[part], "h-2")
    run = Run.objects.get(operation_id=OP)

    with CaptureQueriesContext(connection) as queries:
        runs.set_status(run, Run.Status.FAILED)

    settling = [q["sql"] for q in queries if q["sql"].startswith("UPDATE") and "settled_at" in q["sql"]]
    assert len(settling) == 1
    assert not Handoff.objects.filter(run=run, settled_at__isnull=True).exists()


@pytest.mark.parametrize("status", [Run.Status.RUNNING, Run.Status.WAITING, Run.Status.PARKED, Run.Status.QUEUED])
def test_a_run_that_goes_on_settles_nothing(parts, status):
    receive("created", parts["created"])

    runs.set_status(fresh().run, status)

    assert fresh().settled_at is None


def test_a_handoff_recorded_after_its_run_ended_is_settled_from_the_start(parts):
    receive("created", parts["created"], "h-1")
    runs.set_status(fresh("h-1").run, Run.Status.COMPLETE)

    late = receive("created", parts["created"], "h-late")

    assert late.settled_at is not None
    assert health.due_part(late) is None


# --- exported spans ----------------------------------------------------------------------------


@pytest.fixture
def exported():
    traces.stop()
    exporter = InMemorySpanExporter()
    traces.start(SimpleSpanProcessor(exporter))
    yield exporter
    traces.stop()


def test_a_verdict_in_progress_exports_nothing_and_its_settlement_one_error_span(
    parts, exported, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        receive("created", parts["created"])
    in_progress = exported.get_finished_spans()
    with django_capture_on_commit_callbacks(execute=True):
        settle()

    (span,) = exported.get_finished_spans()
    assert in_progress == ()
    assert (span.attributes["sidewisp.handoff.verdict"], span.attributes["sidewisp.handoff.cause"]) == (
        "STALE_CONTROL",
        "settled",
    )
    assert span.status.status_code == StatusCode.ERROR


def test_a_handoff_proven_before_it_settles_exports_one_healthy_span(
    parts, exported, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for part in ("created", "reduced", "destination"):
            receive(part, parts[part])
        settle()

    verdicts = [span.attributes["sidewisp.handoff.verdict"] for span in exported.get_finished_spans()]
    assert verdicts == ["HEALTHY"]
    assert all(span.status.status_code != StatusCode.ERROR for span in exported.get_finished_spans())


# --- live pages hear of a settle ---------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_settle_that_makes_a_verdict_final_is_published(contracts):
    receive("created", dict(handoff_parts("healthy"))["created"])

    async def listen_while_settling():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(HEALTH_GROUP, channel)
        await sync_to_async(settle_committed)()
        while True:
            message = await asyncio.wait_for(layer.receive(channel), timeout=5)
            if message["event"]["type"] == "handoff.changed":
                return message["event"]

    event = async_to_sync(listen_while_settling)()
    assert (event["handoff_id"], event["part"], event["verdict"]) == ("h-1", "settled", "STALE_CONTROL")


# --- the migration ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_migration_marks_every_existing_handoff_settled():
    before, after = [("receipts", "0015_report_kinds_for_team_shapes")], [("receipts", "0016_settled_verdicts")]
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        run = old.get_model("receipts", "Run").objects.create(operation_id="op-old", thread_id="op-old")
        old.get_model("receipts", "Handoff").objects.create(
            handoff_id="h-old", run=run, verdict="STALE_CONTROL", updated_at=timezone.now() - timedelta(days=1)
        )
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps
        migrated = new.get_model("receipts", "Handoff").objects.get(handoff_id="h-old")
        assert migrated.settled_at == migrated.updated_at
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(leaves)
