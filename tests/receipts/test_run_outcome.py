"""Check 7 on a run that made no handoff (spec v1.3 "Runs with no handoff"): pure, then through ingest."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import transaction

from receipts.ingest import intake, runs
from receipts.ingest.intake import PartEntry, RunEntry
from receipts.models import Handoff, Run
from receipts.verdicts import bundle, classify_run

CHECKED = datetime(2026, 7, 30, 12, tzinfo=UTC)


def verification(result: str, checked_at: datetime | None = CHECKED) -> bundle.Verification:
    return bundle.Verification(verifier="order_exists", result=result, checked_at=checked_at, receipt_id="v-1")


def test_a_completion_claim_with_a_passing_verification_is_healthy():
    found = classify_run("complete", verification("pass"))
    assert (found.verdict, found.boundaries["outcome"], found.boundaries["route"]) == (
        "HEALTHY",
        "pass",
        "not_applicable",
    )


@pytest.mark.parametrize("proof", [None, verification("fail"), verification("pass", checked_at=None)])
def test_a_completion_claim_without_a_passing_verification_is_false_complete(proof):
    found = classify_run("complete", proof)
    assert (found.verdict, found.boundary, found.boundaries["outcome"]) == ("FALSE_COMPLETE", "outcome", "fail")


@pytest.mark.parametrize("status", [None, "running", "waiting", "failed"])
def test_check_7_does_not_apply_without_a_completion_claim(status):
    assert classify_run(status, verification("fail")) is None


@pytest.mark.django_db
def test_a_run_with_no_handoff_keeps_its_outcome_parts_and_is_judged_by_them(contracts):
    op = "op-solo"
    value = {"verifier": "order_exists", "result": "pass", "checked_at": "2026-07-30T12:00:00Z", "receipt_id": "v-1"}
    with transaction.atomic():
        intake.apply(
            [
                RunEntry(op, Run.Status.RUNNING, thread_id="th-solo"),
                PartEntry(op, None, "verification", value, "verify-end"),
                PartEntry(op, None, "final_status", "complete", "complete-end"),
            ]
        )
    run = Run.objects.get(operation_id=op)
    runs.set_status(run, Run.Status.COMPLETE)
    run.refresh_from_db()

    assert not Handoff.objects.filter(run=run).exists()
    assert (run.final_status, run.verification["result"]) == ("complete", "pass")
    assert (run.health, run.health_reasons) == ("healthy", [])


@pytest.mark.django_db
def test_a_bad_outcome_part_for_a_run_with_no_handoff_names_its_field_and_stores_nothing(contracts):
    with transaction.atomic():
        intake.apply([RunEntry("op-bad", Run.Status.RUNNING, thread_id="th-bad")])
    with pytest.raises(bundle.BundleError) as raised, transaction.atomic():
        intake.apply([PartEntry("op-bad", None, "verification", {"result": "maybe"}, "v")])

    assert "result" in raised.value.field
    assert Run.objects.get(operation_id="op-bad").verification is None
