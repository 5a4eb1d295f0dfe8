"""Settled verdicts on the pages: "not yet" is shown in progress, never red, and the run's header, its
timeline and the runs list tell one story, read from one snapshot."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from django.db import connection
from django.template.loader import render_to_string
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import runner
from receipts.ingest import health, intake, recording, runs
from receipts.models import Handoff, Run
from receipts.workers import sources
from sidewisp import pages
from tests.conftest import handoff_parts

pytestmark = pytest.mark.django_db

IN_PROGRESS = "In progress — waiting for the reduced receipt"


def receive(part: str, value: object, handoff_id: str = "h-1", operation_id: str = "op-1") -> Handoff:
    return recording.record(handoff_id=handoff_id, operation_id=operation_id, part=part, value=value).handoff


def settle(handoff_id: str = "h-1", operation_id: str = "op-1") -> None:
    intake.apply([intake.SettleEntry(operation_id, handoff_id)])


def run_page(client, run_id: int) -> str:
    return client.get(reverse("sidewisp:run-detail", args=[run_id])).content.decode()


def card(html: str, handoff: Handoff) -> str:
    return html.split(f'<article id="handoff-{handoff.pk}"')[1].split("</article>")[0]


def head(html: str, handoff: Handoff) -> str:
    """The card's head and its boundary note: what it says of the handoff now (its history follows)."""
    return card(html, handoff).split('<table class="grid">')[0]


def header(html: str, run_id: int) -> str:
    return html.split(f'id="run-{run_id}-health"')[1].split("</div>")[0]


def row(html: str, run_id: int) -> str:
    return html.split(f'id="run-row-{run_id}"')[1].split("</li>")[0]


def shown_story(html: str, run_id: int) -> tuple[set[str], set[str]]:
    """(what the run header says of its handoffs, what the timeline's cards say): reason codes on both sides.

    A card says "uncertain" for a final UNCERTAIN verdict and "in_progress_uncertain" for one in progress.
    """
    said = set(re.findall(r'data-reason="([a-z_]+)"', header(html, run_id)))
    verdict_codes = {code.lower() for code in health.VERDICT_REASONS} | {
        f"in_progress_{code.lower()}" for code in health.DUE_PARTS
    }
    verdict_codes |= {"in_progress_uncertain"}
    shown = set()
    for article in html.split("<article ")[1:]:
        head = article.split("</header>")[0]
        verdict = re.search(r'data-verdict="([A-Z_]+)"', head).group(1)
        if verdict == "HEALTHY":
            continue
        due = 'data-in-progress="' in head
        shown.add(f"in_progress_{verdict.lower()}" if due else verdict.lower())
    return said & verdict_codes, shown


@pytest.fixture
def parts(contracts) -> dict[str, object]:
    return dict(handoff_parts("healthy"))


# --- in progress, then the real verdict -------------------------------------------------------------


def test_the_run_page_shows_a_missing_reduced_receipt_in_progress_not_red(viewer_client, parts):
    handoff = receive("created", parts["created"])

    html = run_page(viewer_client, handoff.run_id)

    shown = card(html, handoff)
    assert IN_PROGRESS in head(html, handoff)
    assert "tone-bad" not in shown and "tone-bad" not in header(html, handoff.run_id)
    assert "boundary failed" not in shown
    control = shown.split(f'id="handoff-{handoff.pk}-control"')[1].split("</tr>")[0]
    assert "state-waiting" in control and "state-fail" not in control


def test_after_settling_the_run_page_shows_the_real_verdict(viewer_client, parts):
    handoff = receive("created", parts["created"])
    before = run_page(viewer_client, handoff.run_id)

    settle()
    html = run_page(viewer_client, handoff.run_id)

    assert IN_PROGRESS in head(before, handoff)
    shown = head(html, handoff)
    assert IN_PROGRESS not in shown
    assert 'data-verdict="STALE_CONTROL"' in shown and "tone-bad" in shown
    assert "<strong>Control</strong> boundary failed: the reduced receipt is missing" in shown
    assert 'data-health="failing"' in header(html, handoff.run_id)
    history = card(html, handoff).split("data-history")[1]
    # The history says when it became a verdict, and what it was before: in progress.
    assert 'data-cause="settled"' in history and IN_PROGRESS in history


def test_the_end_of_the_run_shows_the_real_verdict(viewer_client, parts):
    receive("created", parts["created"])
    handoff = receive("reduced", parts["reduced"])
    waiting = card(run_page(viewer_client, handoff.run_id), handoff)

    runs.set_status(Run.objects.get(pk=handoff.run_id), Run.Status.COMPLETE)
    html = run_page(viewer_client, handoff.run_id)

    assert "In progress — waiting for the destination receipt" in waiting
    assert 'data-verdict="DESTINATION_NOT_STARTED"' in head(html, handoff)
    assert "In progress" not in head(html, handoff)


def test_the_runs_list_agrees_with_the_run_page(viewer_client, parts):
    handoff = receive("created", parts["created"])
    listed = row(viewer_client.get(reverse("sidewisp:runs")).content.decode(), handoff.run_id)
    settle()
    settled = row(viewer_client.get(reverse("sidewisp:runs")).content.decode(), handoff.run_id)

    assert IN_PROGRESS in listed and "failing" not in listed.split("</span>", 1)[1]
    assert 'data-health="in_progress"' in listed
    assert "1 failing" in settled and 'data-verdict="STALE_CONTROL"' in settled and IN_PROGRESS not in settled


def test_a_verdict_filter_does_not_list_a_run_whose_handoff_is_in_progress(viewer_client, parts):
    handoff = receive("created", parts["created"])
    url = f"{reverse('sidewisp:runs')}?verdict=STALE_CONTROL"
    before = viewer_client.get(url).content.decode()

    settle()

    assert f'id="run-row-{handoff.run_id}"' not in before
    assert f'id="run-row-{handoff.run_id}"' in viewer_client.get(url).content.decode()


def test_nothing_is_offered_for_a_verdict_in_progress(client, operator, parts):
    client.force_login(operator)
    handoff = receive("created", parts["created"])

    html = run_page(client, handoff.run_id)
    settle()
    settled = run_page(client, handoff.run_id)

    assert 'data-action="stop"' not in html
    assert "Evidence side by side" not in card(html, handoff)
    assert 'data-action="stop"' in settled and "Evidence side by side" in card(settled, handoff)


# --- header and timeline agree after a decision (the reported states) ------------------------------


@pytest.fixture
def waiting_run(transactional_db) -> Run:
    install_team_contracts()
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    return run


@pytest.fixture
def just_after_the_decision(monkeypatch, viewer):
    """Resume with a decision and keep what the run looked like the moment the decision was applied (its waits
    resolved and the run running again: one run change in the writer's FIFO, written with its batch's rows at
    the batch's end): the run row a page read then, and the run page rendered then. The writer's batch is split
    after the resume (both parts in its one transaction), so the moment does not depend on what it gathered."""
    moment: dict = {}
    apply = intake.apply

    def apply_and_look(entries: list[intake.Entry]) -> list[bool]:
        # A batch writes its rows at its end: the moment is a batch that ends with the resume's run change (its
        # waits resolved, the run running again), whatever the writer gathered after it goes in the next one.
        resumes = [
            i for i, entry in enumerate(entries) if isinstance(entry, intake.RunEntry) and entry.resumed is not None
        ]
        if not resumes:
            return apply(entries)
        stored = apply(entries[: resumes[0] + 1])
        moment["run"] = Run.objects.get(operation_id=entries[resumes[0]].operation_id)
        moment["handoff"] = Handoff.objects.get(run=moment["run"])
        moment["page"] = render_to_string("sidewisp/_run.html", pages.run_context(moment["run"], viewer))
        rest = entries[resumes[0] + 1 :]
        return stored + (apply(rest) if rest else [])

    monkeypatch.setattr(intake, "apply", apply_and_look)

    def _decide(run: Run, decision: dict) -> dict:
        runner.resume_run(run, decision)
        return moment

    return _decide


def test_after_an_approval_a_run_row_read_a_moment_earlier_no_longer_splits_header_and_timeline(
    waiting_run, just_after_the_decision, viewer
):
    moment = just_after_the_decision(waiting_run, {"type": "approve"})
    # The reported state: the run row read at the moment the wait was resolved says "uncertain" (the claim
    # "waiting" outlived its wait) while the handoff is healthy once the resume went on.
    stale = moment["run"]
    assert moment["handoff"].verdict == "UNCERTAIN"
    assert Handoff.objects.get(run=waiting_run).verdict == "HEALTHY"

    html = render_to_string("sidewisp/_run.html", pages.run_context(stale, viewer))

    said, shown = shown_story(html, waiting_run.pk)
    assert said == shown == set()
    assert "Handoff uncertain" not in html and "Handoff healthy" not in html
    assert 'data-health="healthy"' in header(html, waiting_run.pk)


def test_right_after_a_rejection_the_resumed_run_shows_the_final_status_in_progress(
    waiting_run, just_after_the_decision
):
    moment = just_after_the_decision(waiting_run, {"type": "reject", "message": "over budget"})
    handoff, html = moment["handoff"], moment["page"]
    # The reported state: UNCERTAIN because final_status is still the "waiting" claimed before the decision.
    assert (handoff.verdict, handoff.reason) == ("UNCERTAIN", "final_status is waiting but no open wait receipt exists")

    said, shown = shown_story(html, waiting_run.pk)
    assert said == shown == {"in_progress_uncertain"}
    assert "In progress — waiting for the final status" in head(html, handoff)
    assert "Uncertain" not in head(html, handoff) and "Handoff uncertain" not in header(html, waiting_run.pk)


def test_after_a_rejection_the_finished_run_tells_one_story(waiting_run, just_after_the_decision, viewer_client):
    just_after_the_decision(waiting_run, {"type": "reject", "message": "over budget"})

    html = run_page(viewer_client, waiting_run.pk)

    said, shown = shown_story(html, waiting_run.pk)
    assert said == shown == set()
    handoff = Handoff.objects.get(run=waiting_run)
    assert 'data-verdict="HEALTHY"' in head(html, handoff) and "In progress" not in head(html, handoff)


def test_right_after_an_approval_the_header_and_the_timeline_agree(waiting_run, just_after_the_decision):
    moment = just_after_the_decision(waiting_run, {"type": "approve"})

    said, shown = shown_story(moment["page"], waiting_run.pk)

    assert said == shown == {"in_progress_uncertain"}


# --- settle entries through the receipts API -----------------------------------------------------------


def test_a_remote_source_settles_its_handoff_through_the_api(client, contracts):
    token = sources.issue("billing", note="tests")[1]
    operation_id, handoff_id = f"op-{uuid.uuid4().hex[:8]}", f"h-{uuid.uuid4().hex[:8]}"
    created = dict(handoff_parts("healthy"))["created"]
    entries = [
        {"kind": "part", "operation_id": operation_id, "handoff_id": handoff_id, "part": "created", "value": created},
        {"kind": "settle", "operation_id": operation_id, "handoff_id": handoff_id},
        {"kind": "settle", "operation_id": operation_id, "handoff_id": handoff_id},
        {"kind": "settle", "operation_id": operation_id, "handoff_id": "h-never-posted"},
    ]

    response = client.post(
        "/api/v1/receipts",
        data=json.dumps({"entries": entries}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )

    assert response.status_code == 200
    assert [e["stored"] for e in response.json()["entries"]] == [True, True, False, False]
    handoff = Handoff.objects.get(handoff_id=handoff_id)
    assert (handoff.verdict, health.due_part(handoff)) == ("STALE_CONTROL", None)
    assert not Handoff.objects.filter(handoff_id="h-never-posted").exists()


def test_the_api_refuses_a_settle_entry_without_a_handoff_naming_the_field(client, contracts):
    token = sources.issue("billing", note="tests")[1]

    response = client.post(
        "/api/v1/receipts",
        data=json.dumps({"entries": [{"kind": "settle", "operation_id": "op-x"}]}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "entries[0].handoff_id"
    assert not Run.objects.filter(operation_id="op-x").exists()


# --- the pages stay cheap -------------------------------------------------------------------------------


def _in_progress_handoffs(run: Run, n: int) -> None:
    Handoff.objects.bulk_create(
        Handoff(
            handoff_id=f"{run.operation_id}-h{i}",
            run=run,
            sender="triage",
            receiver="sales",
            verdict=("STALE_CONTROL", "DESTINATION_NOT_STARTED")[i % 2],
            boundary=("control", "destination")[i % 2],
            reduced_part=None if i % 2 == 0 else {"goto": "sales"},
        )
        for i in range(n)
    )
    health.refresh(run)


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.parametrize("page", ["run", "runs", "overview"])
def test_pages_with_handoffs_in_progress_run_as_many_queries_for_2_as_for_40(viewer_client, page):
    few, many = (Run.objects.create(operation_id=f"op-{n}", thread_id=f"op-{n}") for n in (2, 40))
    _in_progress_handoffs(few, 2)
    url = {"run": reverse("sidewisp:run-detail", args=[few.pk]), "runs": reverse("sidewisp:runs"), "overview": "/"}
    counted = _queries(viewer_client, url[page])
    _in_progress_handoffs(many, 40)
    url["run"] = reverse("sidewisp:run-detail", args=[many.pk])

    html = viewer_client.get(url[page]).content.decode()

    assert _queries(viewer_client, url[page]) == counted
    assert "In progress — waiting for" in html
    if page != "overview":  # the overview's verdict counts name every verdict, each in its own colour
        assert "tone-bad" not in html
