"""Two modes, one set of pages: who resumes a run, and each action offered only where it can work."""

from __future__ import annotations

from html import unescape

import pytest
from django.urls import reverse

from receipts.models import MiddlewareReport, Run
from tests.sidewisp.conftest import make_hosted

OBSERVED_DRIVE = "This run is driven by the app's own process."
OBSERVED_VERIFIER = "Its outcome verifier runs in the app's process; Sidewisp cannot run it again."
NO_HANDOFF = "No handoffs: this run made none, so it is judged by its outcome alone."
APP_RESUMES = "The app's own process resumes this run: it receives the decision through await_decision."
WORKERS_RESUME = "Sidewisp's workers resume this run from its checkpoint."


@pytest.fixture
def olga(client, person, fake_runtime):
    client.force_login(person("olga", "operator"))
    return client


def get(client, url: str) -> str:
    """The page as a reader sees its text (entities such as &#x27; decoded)."""
    return unescape(client.get(url).content.decode())


def page(client, run_id: int) -> str:
    return get(client, reverse("sidewisp:run-detail", args=[run_id]))


def confirm_url(what: str, pk: int) -> str:
    return reverse("sidewisp:confirm", args=[what, pk])


# --- who resumes it ---------------------------------------------------------------------


def test_an_observed_runs_page_says_the_app_resumes_it(olga, record_handoff):
    wait = record_handoff("h-1", "op-1", "waiting")

    body = page(olga, wait.run_id)

    assert 'data-mode="observed">Observed<' in body
    assert APP_RESUMES in body


def test_a_hosted_runs_page_names_its_graph_and_says_the_workers_resume_it(olga, record_handoff):
    wait = record_handoff("h-1", "op-1", "waiting")
    make_hosted(wait.run)

    body = page(olga, wait.run_id)

    assert "Hosted · graph support-desk" in body
    assert WORKERS_RESUME in body


def test_each_wait_in_the_inbox_says_who_resumes_its_run(olga, record_handoff):
    observed = record_handoff("h-1", "op-1", "waiting")
    hosted = record_handoff("h-2", "op-2", "waiting")
    make_hosted(hosted.run)

    body = get(olga, reverse("sidewisp:waits"))

    assert APP_RESUMES in body.split(f'id="wait-{observed.pk}"')[1].split("</li>")[0]
    assert WORKERS_RESUME in body.split(f'id="wait-{hosted.pk}"')[1].split("</li>")[0]


def test_the_decision_confirm_page_says_who_resumes_the_run(client, person, fake_runtime, record_handoff):
    wait = record_handoff("h-1", "op-1", "waiting")  # owned by "viewer"
    client.force_login(person("viewer", "approver"))

    body = get(client, confirm_url("approve", wait.pk))

    assert APP_RESUMES in body
    assert 'data-confirm="approve"' in body


# --- actions only where they can work -----------------------------------------------------


def test_an_observed_run_offers_no_verify_again_and_says_why(olga, record_handoff):
    false = record_handoff("h-1", "op-1", "false_complete")

    body = page(olga, false.run_id)

    assert OBSERVED_VERIFIER in body
    assert confirm_url("verify", false.pk) not in body


def test_an_observed_runs_reopen_says_the_app_must_resume_it(olga, record_handoff):
    false = record_handoff("h-1", "op-1", "false_complete")

    confirm = get(olga, confirm_url("reopen", false.pk))

    assert confirm_url("reopen", false.pk) in page(olga, false.run_id)
    assert "The app's own process must resume it" in confirm


def test_an_observed_run_can_be_stopped_but_not_driven_and_says_so(olga, record_handoff):
    stale = record_handoff("h-1", "op-1", "stale_control")

    body = page(olga, stale.run_id)

    assert OBSERVED_DRIVE in body and "the app's observe checks it before every step" in body
    assert confirm_url("stop", stale.run_id) in body
    assert "resume auto-continue…" not in body


def test_a_stopped_observed_run_offers_to_lift_the_stop_not_to_resume_it(olga, record_handoff):
    stale = record_handoff("h-1", "op-1", "stale_control")
    Run.objects.filter(pk=stale.run_id).update(auto_continue=False)

    body = page(olga, stale.run_id)
    confirm = get(olga, confirm_url("resume", stale.run_id))

    assert "the app's observe parks this run before its next step" in body
    assert "Evidence reconciled: lift the stop…" in body and "resume auto-continue…" not in body
    assert "the app's process continues it when it calls observe again" in confirm


def test_a_hosted_run_offers_stop_resume_reopen_and_decisions(olga, person, record_handoff):
    stale = make_hosted(record_handoff("h-1", "op-1", "stale_control").run)
    false = record_handoff("h-2", "op-2", "false_complete")
    make_hosted(false.run)
    wait = record_handoff("h-3", "op-3", "waiting")
    make_hosted(wait.run)

    stale_page = page(olga, stale.pk)
    Run.objects.filter(pk=stale.pk).update(auto_continue=False)
    stopped_page = page(olga, stale.pk)

    assert confirm_url("stop", stale.pk) in stale_page and OBSERVED_DRIVE not in stale_page
    assert "Evidence reconciled: resume auto-continue…" in stopped_page
    assert confirm_url("reopen", false.pk) in page(olga, false.run_id)
    assert confirm_url("approve", wait.pk) not in page(olga, wait.run_id)  # an operator does not decide waits
    olga.force_login(person("viewer", "approver"))  # the wait's owner
    assert confirm_url("approve", wait.pk) in page(olga, wait.run_id)


def test_a_hosted_run_whose_graph_is_not_registered_here_offers_no_stop(olga, record_handoff):
    stale = make_hosted(record_handoff("h-1", "op-1", "stale_control").run, graph="gone")

    body = page(olga, stale.pk)

    assert "No Sidewisp worker can drive this run here" in body
    assert confirm_url("stop", stale.pk) not in body


@pytest.mark.usefixtures("no_runtime")
def test_without_a_runtime_no_decision_is_offered_and_the_confirm_page_has_no_form(client, person, record_handoff):
    wait = record_handoff("h-1", "op-1", "waiting")
    client.force_login(person("viewer", "approver"))

    body = page(client, wait.run_id)
    confirm = get(client, confirm_url("approve", wait.pk))

    assert "Nothing resumes this run: no agent runtime is installed." in body
    assert "Approve, reject and edit are not offered" in body and confirm_url("approve", wait.pk) not in body
    assert 'data-not-offered="approve"' in confirm and '<form method="post" action="/waits/' not in confirm


# --- run-level warnings -----------------------------------------------------------------


def test_a_run_without_any_handoff_says_so_neutrally(olga):
    # Spec v1.3: "no handoffs" is a neutral fact (judged by the outcome), never a warning of its own.
    run = Run.objects.create(operation_id="op-quiet", thread_id="th-quiet")
    MiddlewareReport.objects.create(run=run, agent="observer", kind="no_handoff", detail={}, attempt="end")

    body = page(olga, run.pk)
    listed = get(olga, reverse("sidewisp:runs"))
    row = listed.split(f'id="run-row-{run.pk}"')[1].split("</li>")[0]

    assert NO_HANDOFF in body and "nothing it did was proven" not in body
    assert '<span class="muted" data-no-handoff>No handoffs</span>' in row and "⚠" not in row


def test_a_run_with_handoffs_has_no_such_warning(olga, record_handoff):
    healthy = record_handoff("h-1", "op-1", "healthy")

    assert NO_HANDOFF not in page(olga, healthy.run_id)
    assert "data-no-handoff" not in get(olga, reverse("sidewisp:runs"))


def test_dropped_evidence_is_written_out_with_its_part_and_field(olga):
    run = Run.objects.create(operation_id="op-d", thread_id="th-d")
    MiddlewareReport.objects.create(
        run=run,
        agent="sales",
        kind="evidence_dropped",
        detail={"part": "created", "field": "tool_call_id", "reason": "too_long"},
        attempt="1",
    )

    body = page(olga, run.pk)

    assert "Evidence dropped" in body
    assert "The tool_call_id field of the created receipt could not be recorded as it was" in body


# --- the runs list stays cheap ---------------------------------------------------------------


@pytest.mark.parametrize("n", [5, 200])
def test_the_runs_list_shows_modes_and_warnings_in_a_constant_number_of_queries(
    viewer_client, django_assert_max_num_queries, n
):
    runs = Run.objects.bulk_create(
        Run(
            operation_id=f"op-{i}",
            thread_id=f"th-{i}",
            mode="hosted" if i % 2 else "observed",
            graph="support-desk" if i % 2 else "",
        )
        for i in range(n)
    )
    MiddlewareReport.objects.bulk_create(
        MiddlewareReport(run=run, agent="observer", kind="no_handoff", attempt="end") for run in runs[::3]
    )

    with django_assert_max_num_queries(8):  # + the filters' graphs and route versions, + the team's names
        body = get(viewer_client, reverse("sidewisp:runs"))

    assert "Hosted · graph support-desk" in body and ">Observed<" in body
    assert "data-no-handoff>No handoffs<" in body
