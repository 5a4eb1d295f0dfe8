"""Recording many entries as one batch: few queries per receipt, health once per run, one publish."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from receipts.ingest import broadcast, health, healthsets, intake, recording
from receipts.ingest.broadcast import HEALTH_GROUP
from receipts.ingest.contracts import current_contracts
from receipts.ingest.intake import PartEntry, ReportEntry
from receipts.models import ContractVersion, Handoff, Receipt, Run
from tests.factories import healthy_parts


def _entries(handoff_id: str = "h-b", operation_id: str = "op-b") -> list[intake.Entry]:
    parts = [PartEntry(operation_id, handoff_id, part, value) for part, value in healthy_parts().items()]
    return [
        *parts,
        PartEntry(operation_id, None, "final_status", "complete"),
        ReportEntry(operation_id, "sales", "tool_error", {"tool": "lookup"}, "t-1"),
    ]


@pytest.mark.django_db
def test_a_receipt_in_a_batch_costs_a_handful_of_queries(contracts, django_assert_max_num_queries):
    first, *later = _entries()
    with transaction.atomic():
        intake.apply([first])  # the run and the handoff are new: they cost their inserts once

    # Per receipt: the locked handoff, "stored already?", the insert, the update, a verdict change,
    # a sequence number, the signal's receivers (2); per batch: contracts and the run's health.
    with django_assert_max_num_queries(8 * len(later) + 10), transaction.atomic():
        intake.apply(later)

    assert Receipt.objects.filter(handoff__handoff_id="h-b").count() == 5


@pytest.mark.django_db
def test_a_batch_refreshes_each_runs_health_once_and_stores_every_entry(contracts, monkeypatch):
    # A batch judges its runs' health in one place at its end (receipts.ingest.healthsets, issue 32 §1): a run's
    # health refreshed anywhere else, or judged twice, shows here.
    refreshed: list[int] = []
    real_refresh, real_judge = health.refresh, healthsets.judge
    monkeypatch.setattr(health, "refresh", lambda run, **kw: refreshed.append(run.pk) or real_refresh(run, **kw))
    monkeypatch.setattr(
        healthsets, "judge", lambda runs, *a: refreshed.extend(r.pk for r in runs) or real_judge(runs, *a)
    )

    with transaction.atomic():
        stored = intake.apply(_entries())

    run = Run.objects.get(operation_id="op-b")
    handoff = Handoff.objects.get(handoff_id="h-b")
    assert stored == [True] * 6
    assert refreshed == [run.pk]
    assert (handoff.verdict, handoff.final_status) == ("HEALTHY", "complete")
    assert run.health == health.ATTENTION  # the tool error, seen by the one refresh at the end


@pytest.mark.django_db
def test_a_contract_version_added_by_another_process_is_seen_by_the_next_receipt(contracts):
    assert "teams/9" not in current_contracts().routes
    # bulk_create sends no signal: as if the admin in the web process had added it.
    ContractVersion.objects.bulk_create([ContractVersion(version="teams/9", routes={"a": {"b": []}})])

    assert "teams/9" in current_contracts().routes


@pytest.mark.django_db
def test_each_event_of_a_run_gets_the_next_sequence_number(contracts):
    run = Run.objects.create(operation_id="op-seq", thread_id="th-seq")

    assert [recording.next_seq(run) for _ in range(3)] == [1, 2, 3]
    assert Run.objects.get(pk=run.pk).seq == 3


@pytest.mark.django_db(transaction=True)
def test_a_batch_is_announced_in_one_message(contracts):
    async def listen_while_applying():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(HEALTH_GROUP, channel)
        await asyncio.to_thread(_apply_batch)
        return await asyncio.wait_for(layer.receive(channel), timeout=5)

    message = async_to_sync(listen_while_applying)()

    assert message["type"] == "health.events"
    assert [e["part"] for e in message["events"] if e["type"] == "handoff.changed"] == [
        "created",
        "reduced",
        "destination",
        "verification",
        "final_status",
    ]
    assert [e["seq"] for e in message["events"]] == list(range(1, 7))
    assert Receipt.objects.filter(handoff__handoff_id="h-b").count() == 5


def _apply_batch() -> None:
    from django.db import connection

    try:
        with broadcast.batched(), transaction.atomic():
            intake.apply(_entries())
    finally:
        connection.close()


def test_a_process_that_ends_right_after_a_batch_still_sends_its_events(celery_isolation):
    # The publisher only queues a batch's events; a script or command that exits at once must not drop them.
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "import django; django.setup()\n"
        "from receipts.ingest import broadcast\n"
        "broadcast.publish_many([{'type': 'run.changed', 'run': 7, 'seq': n} for n in (1, 2)], wait=False)\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "sidewisp.settings",
        "DEBUG": "1",
        "SIDEWISP_QUEUE": celery_isolation,
    }

    async def listen_while_a_process_publishes():
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(HEALTH_GROUP, channel)
        root = Path(__file__).resolve().parents[2]
        done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", script], cwd=root, env=env, timeout=60)
        assert done.returncode == 0
        return await asyncio.wait_for(layer.receive(channel), timeout=5)

    message = async_to_sync(listen_while_a_process_publishes)()

    assert [e["seq"] for e in message["events"]] == [1, 2]
