from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from receipts.ingest.broadcast import HEALTH_GROUP
from receipts.ingest.recording import record
from receipts.models import AppendOnlyError, Handoff, Receipt, Run
from receipts.verdicts import bundle
from tests.factories import healthy_parts

NOW = datetime(2026, 7, 30, 12, 0, tzinfo=UTC)
CANARY = "CANARY-SECRET-7d41e0"


def _record_all(handoff_id: str = "h-1", operation_id: str = "op-1", **overrides) -> Handoff:
    parts = {**healthy_parts(), **overrides}
    for part, value in parts.items():
        record(handoff_id=handoff_id, operation_id=operation_id, part=part, value=value, now=NOW)
    record(handoff_id=handoff_id, operation_id=operation_id, part="final_status", value="complete", now=NOW)
    return Handoff.objects.get(handoff_id=handoff_id)


def _everything_stored() -> str:
    rows = [
        *Receipt.objects.values_list("payload", flat=True),
        *Handoff.objects.values(),
        *Run.objects.values(),
    ]
    return repr(rows)


@pytest.mark.django_db
def test_it_classifies_a_fully_evidenced_handoff_as_healthy(contracts):
    handoff = _record_all()
    assert handoff.verdict == "HEALTHY"
    assert handoff.boundaries["outcome"] == "pass"
    assert handoff.receipts.count() == 5


@pytest.mark.django_db
def test_it_keeps_the_earliest_failure_when_later_evidence_is_green(contracts):
    reduced = {**healthy_parts()["reduced"], "active_agent_after": "triage"}
    handoff = _record_all(reduced=reduced)
    assert handoff.verdict == "STALE_CONTROL"
    assert handoff.boundary == "control"
    assert handoff.next_move == "reconcile the persisted state before any retry"


@pytest.mark.django_db
def test_it_creates_the_run_for_a_new_operation(contracts):
    _record_all(operation_id="op-new")
    assert Run.objects.get(operation_id="op-new").handoffs.count() == 1


@pytest.mark.django_db
def test_it_ignores_the_same_part_recorded_twice_for_one_attempt(contracts):
    first = record(handoff_id="h-1", operation_id="op-1", part="created", value=healthy_parts()["created"])
    again = record(handoff_id="h-1", operation_id="op-1", part="created", value=healthy_parts()["created"])
    assert first.stored is True
    assert again.stored is False
    assert Receipt.objects.count() == 1


@pytest.mark.django_db
def test_it_keeps_every_attempt_and_judges_the_latest(contracts):
    _record_all()
    late = {**healthy_parts()["destination"], "node_id": "support", "attempt_id": "a-2"}
    record(handoff_id="h-1", operation_id="op-1", part="destination", value=late, attempt="2", now=NOW)
    handoff = Handoff.objects.get(handoff_id="h-1")
    assert handoff.receipts.filter(part="destination").count() == 2
    assert handoff.verdict == "DESTINATION_NOT_STARTED"


@pytest.mark.django_db
def test_it_refuses_a_handoff_id_reused_by_another_operation(contracts):
    record(handoff_id="h-1", operation_id="op-1", part="created", value=healthy_parts()["created"])
    with pytest.raises(bundle.BundleError) as excinfo:
        record(handoff_id="h-1", operation_id="op-2", part="reduced", value=healthy_parts()["reduced"])
    assert excinfo.value.field == "operation_id"
    assert Receipt.objects.count() == 1


MALFORMED = [
    ("created", {"sender": 7}, "created.sender"),
    ("created", {"at": "2026-07-30T10:00:00"}, "created.at"),
    ("created", {"at": "yesterday"}, "created.at"),
    ("reduced", {"tool_message_ids": "call_abc"}, "reduced.tool_message_ids"),
    ("reduced", {"context_keys": ["ok", 3]}, "reduced.context_keys"),
    ("wait", {"state_persisted": "true"}, "wait.state_persisted"),
    ("wait", {"owner": ["x" * 5000]}, "wait.owner"),
    ("verification", {"result": "maybe"}, "verification.result"),
    ("destination", ["sales"], "destination"),
    ("final_status", "done", "final_status"),
    ("outcome", {}, "part"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("part", "value", "field"), MALFORMED)
def test_it_rejects_malformed_input_naming_the_field_and_stores_nothing(contracts, part, value, field):
    _record_all()
    before = _everything_stored()
    with pytest.raises(bundle.BundleError) as excinfo:
        record(handoff_id="h-1", operation_id="op-1", part=part, value=value, attempt="bad")
    assert excinfo.value.field.startswith(field)
    assert _everything_stored() == before


@pytest.mark.django_db
def test_it_never_stores_a_canary_from_an_unknown_field_or_an_overlong_string(contracts):
    created = {**healthy_parts()["created"], "prompt": f"please {CANARY}"}
    record(handoff_id="h-1", operation_id="op-1", part="created", value=created)
    # Spec v1.3: an overlong id or name is stored redacted, the rest of its part kept.
    record(handoff_id="h-1", operation_id="op-1", part="wait", value={"owner": CANARY + "y" * 300})
    assert CANARY not in _everything_stored()
    assert Handoff.objects.get(handoff_id="h-1").wait_part["owner"].startswith("redacted:")


def test_receipts_cannot_be_changed_or_deleted(contracts):
    _record_all()
    receipt = Receipt.objects.first()
    receipt.attempt = "forged"
    with pytest.raises(AppendOnlyError):
        receipt.save()
    with pytest.raises(AppendOnlyError):
        receipt.delete()
    with pytest.raises(AppendOnlyError):
        Receipt.objects.all().delete()
    with pytest.raises(AppendOnlyError):
        Receipt.objects.update(attempt="forged")


test_receipts_cannot_be_changed_or_deleted = pytest.mark.django_db(test_receipts_cannot_be_changed_or_deleted)


@pytest.mark.django_db(transaction=True)
def test_it_publishes_a_minimized_event_after_commit(contracts):
    async def listen_while_recording():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(HEALTH_GROUP, channel)
        created = {**healthy_parts()["created"], "secret": CANARY}
        await database_sync_to_async(record)(handoff_id="h-ev", operation_id="op-ev", part="created", value=created)
        return await asyncio.wait_for(layer.receive(channel), timeout=5)

    message = async_to_sync(listen_while_recording)()
    event = message["event"]
    assert event["handoff_id"] == "h-ev"
    assert event["part"] == "created"
    assert event["verdict"] == "STALE_CONTROL"  # route proven; no reduced receipt yet fails control
    assert event["seq"] == 1
    assert CANARY not in repr(message)


@pytest.mark.django_db(transaction=True)
def test_a_failed_publish_never_fails_the_recording(contracts, settings):
    dead_redis = "redis://127.0.0.1:1/0"
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer", "CONFIG": {"hosts": [dead_redis]}}
    }
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    try:
        result = record(handoff_id="h-1", operation_id="op-1", part="created", value=healthy_parts()["created"])
    finally:
        channel_layers.backends.clear()
    assert result.stored is True
    assert Receipt.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_recording_from_many_threads_loses_no_receipt(contracts):
    parts = healthy_parts()
    jobs = [(part, value, str(attempt)) for part, value in parts.items() for attempt in range(3)]
    jobs.append(("final_status", "complete", "0"))
    errors: list[Exception] = []
    barrier = threading.Barrier(len(jobs))

    def work(part, value, attempt):
        from django.db import connection

        try:
            barrier.wait()
            record(handoff_id="h-c", operation_id="op-c", part=part, value=value, attempt=attempt, now=NOW)
        except Exception as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    handoff = Handoff.objects.get(handoff_id="h-c")
    assert handoff.receipts.count() == len(jobs)
    assert handoff.verdict == "HEALTHY"
    assert Run.objects.get(operation_id="op-c").seq == len(jobs)


@pytest.mark.django_db
def test_a_wait_past_its_deadline_is_reclassified_as_uncertain(contracts):
    from receipts.ingest.recording import reclassify_overdue_waits

    wait = {
        "owner": "ops-lead",
        "reason": "purchase_approval",
        "deadline_utc": "2026-07-30T13:00:00Z",
        "resume_token_id": "rt-1",
        "state_persisted": True,
        "resolved": False,
    }
    parts = healthy_parts()
    del parts["verification"]
    for part, value in {**parts, "wait": wait}.items():
        record(handoff_id="h-w", operation_id="op-w", part=part, value=value, now=NOW)
    record(handoff_id="h-w", operation_id="op-w", part="final_status", value="waiting", now=NOW)
    assert Handoff.objects.get(handoff_id="h-w").verdict == "WAITING_ON_APPROVAL"

    assert reclassify_overdue_waits(now=datetime(2026, 7, 30, 12, 59, tzinfo=UTC)) == 0
    assert reclassify_overdue_waits(now=datetime(2026, 7, 30, 13, 0, tzinfo=UTC)) == 1
    assert Handoff.objects.get(handoff_id="h-w").verdict == "UNCERTAIN"
