"""`receipts.ingest.sqlsets` stores exactly what the ORM's bulk_create and bulk_update store (on PostgreSQL it
sends the rows as one JSON document): awkward text, nested JSON, SQL NULL beside JSON strings, times with
an offset to the microsecond, big numbers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from receipts.ingest import sqlsets
from receipts.models import Handoff, Receipt, Run, VerdictChange

pytestmark = pytest.mark.django_db

AWKWARD = {
    "text": "quote ' \" back\\slash é中😀 \u2028 %s %(x)s",
    "list": [1.1, 1e-7, 12345678901234567890, True, None, {"x": []}],
    "empty": "",
}
AT = datetime(2026, 7, 30, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))


def stored(queryset, *ignored: str) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in {"id", *ignored}} for row in queryset.order_by("pk").values()]


def store(tag: str, insert, update) -> Handoff:
    """A run, a handoff, receipts and a history row stored by `insert`, the handoff then changed by `update`."""
    run = Run(operation_id=f"op-{tag}", thread_id=f"op-{tag}", source_name="it's", input=AWKWARD, seq=2**40)
    insert(Run, [run], ignore_conflicts=True)
    run = Run.objects.get(operation_id=f"op-{tag}")
    new = Handoff(handoff_id=f"h-{tag}", run=run, verdict="ROUTE_REJECTED", sender="s\\'", created_part=AWKWARD)
    new.wait_deadline = new.classified_at = AT
    insert(Handoff, [new], ignore_conflicts=True)
    handoff = Handoff.objects.get(handoff_id=f"h-{tag}")
    handoff.reason, handoff.verification_part, handoff.settled_at, handoff.wait_open = "r'\"\\ é", AWKWARD, AT, True
    update(Handoff, [handoff], ["reason", "verification_part", "settled_at", "wait_open"])
    receipts = [
        Receipt(handoff=handoff, part="created", attempt="1'", payload=AWKWARD, recorded_at=AT),
        Receipt(handoff=handoff, part="wait", attempt="2", payload=None, recorded_at=AT),  # SQL NULL
        Receipt(handoff=handoff, part="reduced", attempt="3", payload="complete", recorded_at=AT),  # a JSON string
    ]
    for receipt in receipts:
        receipt.fill_handoff_month()
    insert(Receipt, receipts)
    insert(VerdictChange, [VerdictChange(handoff=handoff, verdict="HEALTHY", cause="created", at=AT)])
    return handoff


def orm_insert(model, objs, ignore_conflicts=False):
    model.objects.bulk_create(objs, ignore_conflicts=ignore_conflicts)


def orm_update(model, objs, names):
    model.objects.bulk_update(objs, names)


def as_rows(model, objs, names=None) -> list[dict]:
    """The objects as a batch gives the rows it only writes: mappings of attnames (`names` and the primary key
    for an update, every field but the primary key for an insert)."""
    meta = model._meta
    fields = [meta.pk, *map(meta.get_field, names)] if names else [f for f in meta.concrete_fields if f is not meta.pk]
    return [{field.attname: getattr(obj, field.attname) for field in fields} for obj in objs]


def rows_insert(model, objs, ignore_conflicts=False):
    # Runs and handoffs are inserted as objects (a batch goes on using them); receipts and history as rows.
    rows = as_rows(model, objs) if model in (Receipt, VerdictChange) else objs
    sqlsets.insert_rows(model, rows, ignore_conflicts=ignore_conflicts)


def rows_update(model, objs, names):
    sqlsets.update_rows(model, as_rows(model, objs, names), names)


def assert_stored_alike(ours: Handoff, orms: Handoff) -> None:
    keys = ("operation_id", "thread_id", "created_at", "updated_at")
    assert stored(Run.objects.filter(pk=ours.run_id), *keys) == stored(Run.objects.filter(pk=orms.run_id), *keys)
    keys = ("handoff_id", "run_id", "created_at", "updated_at")
    assert stored(Handoff.objects.filter(pk=ours.pk), *keys) == stored(Handoff.objects.filter(pk=orms.pk), *keys)
    for model in (Receipt, VerdictChange):
        mine, theirs = model.objects.filter(handoff=ours), model.objects.filter(handoff=orms)
        assert stored(mine, "handoff_id") == stored(theirs, "handoff_id")
    assert Receipt.objects.filter(handoff=ours, part="wait", payload__isnull=True).exists()
    assert Receipt.objects.get(handoff=ours, part="reduced").payload == "complete"


def test_rows_are_stored_as_the_orm_stores_them() -> None:
    ours = store("a", sqlsets.insert_rows, sqlsets.update_rows)
    orms = store("b", orm_insert, orm_update)

    assert_stored_alike(ours, orms)


def test_rows_given_as_mappings_are_stored_as_the_objects_would_be() -> None:
    ours = store("c", rows_insert, rows_update)
    orms = store("d", orm_insert, orm_update)

    assert_stored_alike(ours, orms)
    assert Receipt.objects.filter(handoff=ours).count() == 3 and VerdictChange.objects.filter(handoff=ours).exists()


def test_a_document_orjson_cannot_write_is_stored_as_the_orm_stores_it() -> None:
    # An integer beyond 64 bits and a key that is not text: written by the standard library's encoder instead.
    beyond = {"big": 2**70, "small": -(2**70), 7: "a number as key"}
    handoffs = []
    for tag, insert in (("e", rows_insert), ("f", orm_insert)):
        run = Run.objects.create(operation_id=f"op-{tag}", thread_id=f"op-{tag}")
        handoff = Handoff.objects.create(handoff_id=f"h-{tag}", run=run, verdict="ROUTE_REJECTED")
        receipt = Receipt(handoff=handoff, part="created", attempt="1", payload=beyond, recorded_at=AT)
        receipt.fill_handoff_month()
        insert(Receipt, [receipt])
        handoffs.append(handoff)

    ours, orms = (Receipt.objects.get(handoff=handoff) for handoff in handoffs)
    assert ours.payload == orms.payload == {"big": 2**70, "small": -(2**70), "7": "a number as key"}
    assert (ours.recorded_at, ours.handoff_month) == (orms.recorded_at, orms.handoff_month)
