"""Every failure kind has a next step, offered only to whom it is allowed and only where it can work.

Personas: an operator (oncall), an approver who owns the wait (ops-lead), another approver, a viewer
(watcher) and an admin (boss).
"""

from __future__ import annotations

import itertools
import logging
import re
import uuid
from datetime import timedelta
from html import unescape
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from receipts import actions
from receipts.ingest.recording import reclassify_overdue_waits, record
from receipts.models import AuditEntry, Decision, OutboxIntent, Run, VerdictChange
from receipts.queries import dashboard

CODENAMES = ("view_dashboard", "decide_own_wait", "decide_any_wait", "reopen_task", "resolve_task", "control_run")


def key() -> str:
    return uuid.uuid4().hex


def text(response) -> str:
    return unescape(response.content.decode())


@pytest.fixture
def people(person):
    return {
        "viewer": person("watcher", "viewer"),
        "operator": person("oncall", "operator"),
        "owner": person("ops-lead", "approver"),
        "other_approver": person("approver-2", "approver"),
        "admin": person("boss", "admin"),
    }


@pytest.fixture
def as_(client, people):
    def _as(role: str):
        client.force_login(people[role])
        return client

    return _as


@pytest.fixture
def false_complete(scenario_handoff):
    return scenario_handoff("false_complete", scenario="false_complete")


def settle(client, how: str, handoff, reason: str = "verified by phone with the customer", **extra):
    url = reverse(f"sidewisp:task-{how}", args=[handoff.pk])
    return client.post(url, {"key": key(), "reason": reason, **extra})


# --- FALSE_COMPLETE: accept as is, mark resolved ----------------------------------------------


def test_accepting_a_false_completion_keeps_its_verdict_and_closes_it_as_an_open_failure(as_, false_complete):
    response = settle(as_("operator"), "accept", false_complete)

    false_complete.refresh_from_db()
    assert response.status_code == 200
    assert false_complete.verdict == "FALSE_COMPLETE"
    assert false_complete.verdict_changes.last().cause == "task.accept"
    assert dashboard.false_completion_count() == 0
    entry = AuditEntry.objects.get(action="task.accept")
    assert (entry.outcome, entry.actor_name, entry.reason) == ("done", "oncall", "verified by phone with the customer")


def test_the_run_page_says_who_accepted_it_and_why_and_offers_nothing_more(as_, false_complete):
    client = as_("operator")
    settle(client, "accept", false_complete)

    body = text(client.get(reverse("sidewisp:run-detail", args=[false_complete.run_id])))

    assert 'data-settled="accept"' in body and "Accepted as is by <strong>oncall</strong>" in body
    assert "verified by phone with the customer" in body
    assert "The verdict stays false complete" in body
    assert reverse("sidewisp:confirm", args=["accept", false_complete.pk]) not in body


def test_marking_resolved_is_recorded_as_a_resolution(as_, false_complete):
    response = settle(as_("admin"), "resolve", false_complete, reason="order placed by hand")

    assert response.status_code == 200
    assert "marked resolved" in text(response)
    assert false_complete.verdict_changes.last().cause == "task.resolve"


@pytest.mark.parametrize("how", ["accept", "resolve"])
def test_a_settlement_without_a_reason_changes_nothing(as_, false_complete, how):
    before = VerdictChange.objects.count()

    response = settle(as_("operator"), how, false_complete, reason="  ")

    assert response.status_code == 400
    assert VerdictChange.objects.count() == before
    assert not AuditEntry.objects.filter(outcome="done").exists()
    assert dashboard.false_completion_count() == 1


def test_a_second_settlement_says_who_settled_it_and_changes_nothing(as_, false_complete):
    settle(as_("operator"), "accept", false_complete)
    before = VerdictChange.objects.count()

    again = settle(as_("admin"), "resolve", false_complete)

    assert again.status_code == 200
    assert "Already accepted as is by oncall" in text(again)
    assert VerdictChange.objects.count() == before


def test_only_a_false_completion_can_be_settled(as_, scenario_handoff):
    healthy = scenario_handoff("healthy", scenario="healthy_purchase")

    response = settle(as_("operator"), "accept", healthy)

    assert response.status_code == 409
    assert AuditEntry.objects.get().outcome == "refused"


def test_new_evidence_that_changes_the_verdict_supersedes_a_settlement(as_, false_complete):
    settle(as_("operator"), "accept", false_complete)
    now = timezone.now()
    record(
        handoff_id=false_complete.handoff_id,
        operation_id=false_complete.run.operation_id,
        part="verification",
        value={"verifier": "order_exists", "result": "pass", "checked_at": now.isoformat(), "receipt_id": "v-9"},
    )

    false_complete.refresh_from_db()
    assert false_complete.verdict == "HEALTHY"
    assert actions.settlement(false_complete) is None
    assert false_complete.verdict_changes.last().cause == "verification"


# --- parked runs and DESTINATION_NOT_STARTED: retry from the checkpoint -------------------------------


@pytest.fixture
def parked(scenario_handoff):
    run = scenario_handoff("stale_control", scenario="stale_control").run
    Run.objects.filter(pk=run.pk).update(status=Run.Status.PARKED)
    run.refresh_from_db()
    return run


def retry(client, run):
    return client.post(reverse("sidewisp:run-retry", args=[run.pk]), {"key": key(), "reason": "lease expired"})


def test_retrying_a_parked_run_promises_exactly_one_start_through_the_outbox(as_, parked):
    client = as_("operator")

    first = retry(client, parked)
    second = retry(client, parked)

    starts = OutboxIntent.objects.filter(run=parked, kind=OutboxIntent.Kind.START)
    assert first.status_code == 200 and "from its last checkpoint" in text(first)
    assert second.status_code == 409 and "already queued" in text(second)
    assert starts.count() == 1
    assert starts.get().key.endswith(f"audit-{AuditEntry.objects.get(action='run.retry', outcome='done').pk}")


def test_a_run_page_offers_retry_for_a_parked_run_with_links_to_inspect(as_, parked):
    body = text(as_("operator").get(reverse("sidewisp:run-detail", args=[parked.pk])))

    assert reverse("sidewisp:confirm", args=["retry", parked.pk]) in body
    assert "data-inspect" in body and f'href="#run-{parked.pk}-reports"' in body


@pytest.mark.parametrize("status", [Run.Status.COMPLETE, Run.Status.FAILED])
def test_an_ended_run_cannot_be_retried(as_, parked, status):
    Run.objects.filter(pk=parked.pk).update(status=status)

    response = retry(as_("operator"), parked)
    page = text(as_("operator").get(reverse("sidewisp:run-detail", args=[parked.pk])))

    assert response.status_code == 409 and "has ended" in text(response)
    assert not OutboxIntent.objects.exists()
    assert reverse("sidewisp:confirm", args=["retry", parked.pk]) not in page


def test_a_run_no_worker_can_drive_is_not_retried(as_, record_handoff):
    observed = record_handoff("h-1", "op-1", "stale_control").run  # observed: the app drives it
    Run.objects.filter(pk=observed.pk).update(status=Run.Status.PARKED)

    response = retry(as_("operator"), observed)
    page = text(as_("operator").get(reverse("sidewisp:run-detail", args=[observed.pk])))

    assert response.status_code == 409 and "No Sidewisp worker can drive this run" in text(response)
    assert reverse("sidewisp:confirm", args=["retry", observed.pk]) not in page
    assert not OutboxIntent.objects.exists()


def test_a_stopped_run_is_resumed_not_retried(as_, parked):
    Run.objects.filter(pk=parked.pk).update(auto_continue=False)

    response = retry(as_("operator"), parked)

    assert response.status_code == 409 and "resume it instead" in text(response)


# --- stop and resume only where they can work -----------------------------------------------------------


def test_a_finished_run_offers_no_stop_or_resume_and_refuses_them(as_, scenario_handoff):
    stale = scenario_handoff("stale_control", scenario="stale_control")
    Run.objects.filter(pk=stale.run_id).update(status=Run.Status.COMPLETE)
    client = as_("operator")

    page = text(client.get(reverse("sidewisp:run-detail", args=[stale.run_id])))
    stop = client.post(reverse("sidewisp:run-stop", args=[stale.run_id]), {"key": key(), "reason": "r"})
    Run.objects.filter(pk=stale.run_id).update(auto_continue=False)
    resume = client.post(reverse("sidewisp:run-resume", args=[stale.run_id]), {"key": key(), "reason": "r"})

    assert 'data-action="stop"' not in page and 'data-action="resume"' not in page
    assert "the run has ended (complete)" in page
    assert (stop.status_code, resume.status_code) == (409, 409)
    assert "has ended" in text(stop)
    assert not AuditEntry.objects.filter(outcome="done").exists()


def test_the_confirm_page_of_a_decided_wait_shows_the_decision_and_no_form(as_, people, scenario_handoff):
    wait = scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
    Decision.objects.create(
        run=wait.run,
        handoff=wait,
        resume_token_id=wait.wait_part["resume_token_id"],
        kind="approve",
        decided_by=people["owner"],
    )

    body = text(as_("owner").get(reverse("sidewisp:confirm", args=["approve", wait.pk])))

    assert "Already decided" in body and 'data-decided="approve"' in body
    assert "approved</strong> by <strong>ops-lead</strong>" in body
    assert '<form method="post" action="/waits/' not in body and 'data-confirm="approve"' not in body


# --- role-aware pages -------------------------------------------------------------------------------------


@pytest.fixture
def everything(scenario_handoff):
    """One of each: a valid wait of ops-lead, an uncertain wait, a false completion, a stale run, a parked run."""
    made = {
        "wait": scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead"),
        "uncertain": scenario_handoff("waiting", scenario="waiting_on_approval", owner=""),
        "false": scenario_handoff("false_complete", scenario="false_complete"),
        "stale": scenario_handoff("stale_control", scenario="stale_control"),
    }
    Run.objects.filter(pk=made["stale"].run_id).update(status=Run.Status.PARKED)
    return made


def _pages(everything) -> list[str]:
    runs = [reverse("sidewisp:run-detail", args=[h.run_id]) for h in everything.values()]
    return [
        reverse("sidewisp:overview"),
        reverse("sidewisp:waits"),
        reverse("sidewisp:false-completions"),
        *runs,
    ]


def test_a_viewer_sees_no_action_link_on_any_page(as_, everything):
    client = as_("viewer")

    links = {url: text(client.get(url)).count('class="action"') for url in _pages(everything)}

    assert links == dict.fromkeys(links, 0)
    assert "/confirm/" not in "".join(text(client.get(url)) for url in _pages(everything))


def test_each_role_sees_only_the_actions_it_may_take(as_, everything):
    def offered(role: str) -> set[str]:
        client = as_(role)
        found = set()
        for url in _pages(everything):
            body = text(client.get(url))
            found |= {what for what in actions_in(body)}
        return found

    assert offered("owner") == {"approve", "reject", "edit"}
    assert offered("other_approver") == set()
    assert offered("operator") == {"reassign", "cancel", "reopen", "verify", "accept", "resolve", "stop", "retry"}
    assert offered("admin") == offered("operator") | {"approve", "reject", "edit"}


def actions_in(body: str) -> set[str]:
    return set(re.findall(r'data-action="(\w+)"', body))


def test_opening_a_confirm_page_without_permission_says_so_and_writes_no_audit_entry(as_, everything):
    client = as_("viewer")

    response = client.get(reverse("sidewisp:confirm", args=["accept", everything["false"].pk]))

    assert response.status_code == 403
    assert "Accepting this task as is needs the accept-or-resolve-task permission" in text(response)
    assert "Nothing was done or recorded." in text(response)
    assert not AuditEntry.objects.exists()


def test_a_refused_post_is_still_audited(as_, everything):
    response = settle(as_("viewer"), "accept", everything["false"])

    assert response.status_code == 403
    assert AuditEntry.objects.get().outcome == "denied"


# --- what a 403 says --------------------------------------------------------------------------------------


def test_an_approver_on_the_audit_page_is_told_what_is_missing_in_words(as_):
    body = text(as_("owner").get(reverse("sidewisp:audit")))

    assert "Reading the audit log needs the run-control or the change-limits permission" in body
    assert "viewer permission" not in body


def test_deciding_someone_elses_wait_names_its_owner_and_the_permission_in_words(as_, everything):
    wait = everything["wait"]

    response = as_("other_approver").post(
        reverse("sidewisp:wait-decide", args=[wait.pk]),
        {"decision": "approve", "token": wait.wait_part["resume_token_id"], "key": key()},
    )

    body = text(response)
    assert "Deciding this wait needs its owner (ops-lead) or the approve-any-wait permission" in body
    assert "the the" not in body
    assert not any(codename in body for codename in CODENAMES)
    assert AuditEntry.objects.get().reason.startswith("Deciding this wait needs its owner (ops-lead)")


@pytest.mark.parametrize("what", ["reopen", "accept", "stop", "retry", "reassign"])
def test_no_denial_names_a_codename(as_, everything, what):
    target = everything["stale"].run_id if what in ("stop", "retry") else everything["false"].pk
    if what == "reassign":
        target = everything["uncertain"].pk

    body = text(as_("viewer").get(reverse("sidewisp:confirm", args=[what, target])))

    assert "needs the" in body and "the the" not in body
    assert not any(codename in body for codename in CODENAMES)


# --- verdict history ----------------------------------------------------------------------------------------


def test_each_verdict_change_is_one_history_row_naming_its_cause(record_handoff):
    handoff = record_handoff("h-1", "op-1", "false_complete")

    changes = list(handoff.verdict_changes.values_list("verdict", "cause"))

    assert changes[0][1] == "created"
    assert changes[-1] == ("FALSE_COMPLETE", "final_status")
    assert all(a[0] != b[0] for a, b in itertools.pairwise(changes))  # a row only on a change


def test_a_receipt_that_does_not_change_the_verdict_adds_no_row(record_handoff):
    handoff = record_handoff("h-1", "op-1", "false_complete")
    before = handoff.verdict_changes.count()

    record(handoff_id="h-1", operation_id="op-1", part="final_status", value="complete", attempt="2")

    assert handoff.verdict_changes.count() == before


def test_a_wait_that_runs_out_of_time_is_reclassified_in_the_history(record_handoff):
    wait = record_handoff("h-1", "op-1", "waiting", deadline=timezone.now() + timedelta(seconds=1))

    reclassify_overdue_waits(now=timezone.now() + timedelta(minutes=5))

    assert list(wait.verdict_changes.values_list("verdict", "cause"))[-1] == ("UNCERTAIN", "reclassified")


def test_the_run_page_shows_the_verdict_history(as_, false_complete):
    body = text(as_("viewer").get(reverse("sidewisp:run-detail", args=[false_complete.run_id])))

    assert "data-history" in body and 'data-cause="final_status"' in body


def test_the_settlement_causes_are_the_ones_the_dashboard_leaves_out():
    assert actions.SETTLEMENTS == dashboard.SETTLEMENT_CAUSES


# --- quiet logs and the favicon -------------------------------------------------------------------------------


def test_a_403_is_one_log_line_without_a_traceback(as_, caplog):
    with caplog.at_level(logging.WARNING, logger="django.request"):
        as_("owner").get(reverse("sidewisp:audit"))

    forbidden = [r for r in caplog.records if r.name == "django.request"]
    assert len(forbidden) == 1
    assert forbidden[0].exc_info is None and "Forbidden" in forbidden[0].getMessage()


def test_every_page_links_a_favicon_that_exists(as_):
    body = text(as_("viewer").get(reverse("sidewisp:overview")))

    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in body
    assert (Path(settings.BASE_DIR) / "static" / "favicon.svg").read_text().startswith("<svg")


def test_a_settled_false_completion_turns_its_run_from_failing_to_attention_not_green(as_, false_complete):
    run = false_complete.run
    run.refresh_from_db()
    assert run.health == "failing"

    settle(as_("operator"), "accept", false_complete)

    run.refresh_from_db()
    assert run.health == "attention"
    assert "False completion settled by an operator" in [r["text"] for r in run.health_reasons]
