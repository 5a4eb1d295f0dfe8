"""Run health (receipts.ingest.health): the worst of verdicts, task status and middleware alarms, each reason named."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from receipts.ingest import health
from receipts.models import MiddlewareReport, Run
from receipts.verdicts.bundle import VERDICTS

FAILED_VERDICTS = [v for v, (level, _) in health.VERDICT_REASONS.items() if level == health.FAILING]
KINDS = list(MiddlewareReport.Kind.values)
STATUSES = list(Run.Status.values)


def texts(found: health.Health) -> list[str]:
    return [r["text"] for r in found.reasons]


# --- the property: nothing failed is ever green ---------------------------------------


@given(
    verdicts=st.dictionaries(st.sampled_from(sorted(VERDICTS)), st.integers(0, 5)),
    status=st.sampled_from(STATUSES),
    error=st.sampled_from(["", "NoCompletionClaim"]),
    reports=st.lists(st.tuples(st.sampled_from(KINDS), st.just({}), st.integers(1, 4)), max_size=4),
    verification=st.sampled_from([None, "pass", "fail"]),
)
def test_a_run_with_any_failure_is_never_healthy(verdicts, status, error, reports, verification):
    found = health.assess(
        status=status, error=error, verdicts=verdicts, reports=reports, latest_verification=verification
    )
    failed_verdict = any(verdicts.get(v) for v in FAILED_VERDICTS)
    failed_report = any(health.REPORT_REASONS.get(kind, ("",))[0] == health.FAILING for kind, _, _ in reports)
    ended_unproven = status == "complete" and (not any(verdicts.values()) or verification != "pass")
    if failed_verdict or failed_report or status == "failed" or ended_unproven:
        assert found.level == health.FAILING
    if found.level == health.HEALTHY:
        assert found.reasons == []
        assert status == "complete" and verification == "pass"
        assert set(v for v, n in verdicts.items() if n) == {"HEALTHY"}
    assert found.level in health.LEVELS


@given(status=st.sampled_from(STATUSES), verdict=st.sampled_from(sorted(VERDICTS)))
def test_the_level_is_the_worst_of_its_reasons(status, verdict):
    found = health.assess(status=status, verdicts={verdict: 1}, latest_verification="pass")
    assert found.level == health.worst(r["level"] for r in found.reasons)


# --- the reasons' words and grouping ----------------------------------------------------


def test_a_dead_model_after_a_sound_handoff_is_failing_with_its_reasons_named():
    found = health.assess(
        status="failed",
        error="NoCompletionClaim",
        verdicts={"HEALTHY": 1},
        reports=[("model_failed", {"attempts": 3}, 1)],
    )
    assert found.level == health.FAILING
    assert texts(found) == ["Task failed (NoCompletionClaim)", "Model failed (3 attempts)"]


def test_identical_call_limit_reports_are_one_reason_with_a_count():
    found = health.assess(
        status="complete", reports=[("call_limit", {"tool": "check_inventory"}, 4)], latest_verification=None
    )
    assert "Call limit hit (check_inventory) ×4" in texts(found)  # noqa: RUF001


def test_a_complete_run_with_no_handoff_and_no_passing_verification_is_false_complete_not_no_handoff():
    # Spec v1.3: a run with no handoff is judged by its outcome; "no handoff" is never the reason.
    unproven = "False complete: no handoff, and the outcome is not verified"
    found = health.assess(status="complete", reports=[("no_handoff", {"status": "complete"}, 1)])
    assert (found.level, texts(found)) == (health.FAILING, [unproven])
    assert texts(health.assess(status="complete")) == [unproven]
    failed = health.assess(status="complete", run_outcome="FALSE_COMPLETE", run_verification="fail")
    assert texts(failed) == ["False complete: no handoff, and the outcome verification did not pass"]


def test_a_complete_run_with_no_handoff_and_a_passing_verification_is_healthy():
    found = health.assess(status="complete", reports=[("no_handoff", {}, 1)], run_outcome="HEALTHY")
    assert (found.level, found.reasons) == (health.HEALTHY, [])


def test_a_complete_run_whose_latest_verification_failed_is_failing():
    found = health.assess(status="complete", verdicts={"HEALTHY": 2}, latest_verification="fail")
    assert found.level == health.FAILING
    assert texts(found) == ["Outcome verification failed"]


def test_handoff_verdicts_are_counted():
    found = health.assess(status="running", verdicts={"STALE_CONTROL": 2, "HEALTHY": 3, "UNCERTAIN": 1})
    assert texts(found) == ["Handoff stale control ×2", "Handoff uncertain", "Task running"]  # noqa: RUF001


def test_a_waiting_run_waits_and_a_running_one_is_in_progress():
    waiting = health.assess(status="waiting", verdicts={"WAITING_ON_APPROVAL": 1})
    assert waiting.level == health.WAITING
    assert health.assess(status="running", verdicts={"HEALTHY": 1}).level == health.IN_PROGRESS


def test_summaries_and_context_edits_are_information_only():
    found = health.assess(
        status="complete",
        verdicts={"HEALTHY": 1},
        reports=[("summarized", {}, 1), ("context_edited", {}, 2)],
        latest_verification="pass",
    )
    assert found == health.Health(health.HEALTHY, [])


# --- stored on the run --------------------------------------------------------------------


@pytest.mark.django_db
def test_a_run_reaches_failing_through_the_recording_paths(contracts):
    from agents.observe import database
    from receipts.ingest import runs
    from receipts.ingest.recording import record
    from tests.conftest import handoff_parts

    for part, value in handoff_parts("healthy")[:3]:  # created, reduced, destination: a sound handoff
        record(handoff_id="h-dead", operation_id="op-dead", part=part, value=value)
    run = Run.objects.get(operation_id="op-dead")
    assert run.health == health.IN_PROGRESS
    database.add_report("op-dead", "sales", "model_failed", {"attempts": 3}, "end")
    runs.set_status(run, Run.Status.FAILED, error="NoCompletionClaim")

    run.refresh_from_db()
    assert run.health == health.FAILING
    assert [r["text"] for r in run.health_reasons] == ["Task failed (NoCompletionClaim)", "Model failed (3 attempts)"]


@pytest.mark.django_db
def test_refresh_all_fills_runs_recorded_before_health_existed():
    from receipts.models import Handoff

    run = Run.objects.create(operation_id="op-old", thread_id="t-old", status=Run.Status.FAILED)
    assert run.health == ""
    changed = health.refresh_all(run_model=Run, handoffs=Handoff, reports=MiddlewareReport)
    run.refresh_from_db()
    assert changed == 1
    assert run.health == health.FAILING


def test_a_settled_false_completion_needs_attention_and_is_never_green():
    found = health.assess(
        status="complete",
        verdicts={"HEALTHY": 1, "FALSE_COMPLETE": 0, health.SETTLED_FALSE_COMPLETE: 1},
        latest_verification="settled",
    )

    assert found.level == health.ATTENTION
    assert [r["text"] for r in found.reasons] == ["False completion settled by an operator"]
