"""Honest colours (issue 21 §3): what a page shows is what happened, never a check mark for an action that did not."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import execution, runner
from receipts import actions
from receipts.ingest import broadcast
from receipts.models import AuditEntry, Decision


@pytest.fixture(autouse=True)
def contracts(transactional_db, monkeypatch):
    install_team_contracts()
    monkeypatch.setattr(broadcast, "publish", lambda event: True)


@pytest.fixture
def wait():
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    return run.handoffs.get()


def _resolved_section(client, user) -> str:
    client.force_login(user)
    page = client.get(reverse("sidewisp:waits")).content.decode()
    return page[page.index('id="waits-resolved"') :]


def _badge(section: str) -> str:
    """The text of the first verdict badge in `section`, tags dropped."""
    found = re.search(r'<span class="verdict[^>]*><span class="icon"[^>]*>(.*?)</span>(.*?)</span>', section)
    return f"{found.group(1)} {found.group(2).strip()}"


def test_a_rejected_wait_under_recently_resolved_says_who_rejected_it_never_healthy(client, owner, wait, monkeypatch):
    from agents import tasks

    monkeypatch.setattr(tasks.resume_run, "delay", lambda pk: None)
    client.force_login(owner)
    data = {"decision": "reject", "token": wait.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), {**data, "reason": "over budget"})
    runner.resume_run(wait.run, Decision.objects.get().as_resume())

    section = _resolved_section(client, owner)

    assert 'data-outcome="rejected"' in section
    assert _badge(section) == "✖ Rejected by ops-lead"
    assert "✔" not in section and "Handoff healthy" not in section


def test_an_expired_wait_says_the_safe_default_was_applied_never_healthy(
    client, owner, wait, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False):
        assert actions.expire_overdue_waits(now=wait.wait_deadline + timedelta(minutes=1)) == 1
    execution.resume(Decision.objects.get().pk)

    section = _resolved_section(client, owner)

    assert 'data-outcome="expired"' in section
    assert _badge(section) == "⌛ Expired — safe default applied"
    assert "✔" not in section and "Handoff healthy" not in section


def test_an_approved_wait_keeps_its_verdict(client, owner, wait, monkeypatch):
    from agents import tasks

    monkeypatch.setattr(tasks.resume_run, "delay", lambda pk: None)
    client.force_login(owner)
    data = {"decision": "approve", "token": wait.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), data)
    runner.resume_run(wait.run, Decision.objects.get().as_resume())

    section = _resolved_section(client, owner)

    assert "data-outcome" not in section and 'data-verdict="HEALTHY"' in section


# --- the overview's verdict tiles follow the window ----------------------------------------------


def _tiles(client, window: str) -> dict[str, int]:
    page = client.get(reverse("sidewisp:overview"), {"window": window}).content.decode()
    tiles = page[page.index('id="verdict-counts"') :]
    return {code: int(n) for code, n in re.findall(r'data-count="(\w+)">(\d+)<', tiles)}


def test_the_verdict_tiles_count_the_chosen_windows_handoffs_like_the_header(client, owner, record_handoff):
    from receipts.models import Handoff

    for n in range(3):
        record_handoff(f"h-old-{n}", f"op-old-{n}", "healthy")
    record_handoff("h-new", "op-new", "healthy")
    record_handoff("h-false", "op-false", "false_complete")
    Handoff.objects.filter(handoff_id__startswith="h-old").update(created_at=timezone.now() - timedelta(hours=3))
    client.force_login(owner)

    short, week = _tiles(client, "1h"), _tiles(client, "7d")

    assert (short["HEALTHY"], short["FALSE_COMPLETE"], sum(short.values())) == (1, 1, 2)
    assert (week["HEALTHY"], sum(week.values())) == (4, 5)
    page = client.get(reverse("sidewisp:overview"), {"window": "1h"}).content.decode()
    assert '<div data-stat="handoffs"><dt>Handoffs</dt><dd>2</dd>' in page
    assert "created in the last 1 h" in page


# --- the run page says what holds a run, and what to do about a failure without a failing handoff --------------


def _run_page(client, user, name: str) -> tuple[str, object]:
    run = create_run(name)
    runner.start_run(run)
    client.force_login(user)
    return client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode(), run


def _reasons(page: str) -> list[str]:
    return re.findall(r'<li class="reason[^"]*" data-reason="[^"]*">([^<]*)</li>', page)


def test_a_destination_held_by_interrupt_before_says_it_is_held_not_that_auto_continue_stopped(client, owner):
    page, run = _run_page(client, owner, "destination_not_started")

    run.refresh_from_db()
    assert (run.status, run.auto_continue) == ("parked", True)
    assert "Held before sales (interrupt_before)" in _reasons(page)
    assert "auto-continue stopped" not in page
    assert "held_before:" not in page  # the stored code is never shown as an error


def test_a_parked_run_whose_auto_continue_was_stopped_still_says_so():
    from receipts.ingest import health

    found = health.assess(status="parked")

    assert [r["text"] for r in found.reasons] == ["Task parked (auto-continue stopped)"]


def test_a_failed_run_with_a_healthy_handoff_gets_a_safe_next_move(client, owner):
    page, run = _run_page(client, owner, "dead_model_after_handoff")

    assert list(run.handoffs.values_list("verdict", flat=True)) == ["HEALTHY"]
    move = re.search(r"data-run-next-move>Safe next move: <strong>([^<]*)</strong>", page)
    assert move is not None
    assert move.group(1).startswith("check the model provider")


def test_a_run_whose_handoff_failed_leaves_the_next_move_to_the_handoff(client, owner):
    page, _ = _run_page(client, owner, "route_rejected")

    assert "data-run-next-move" not in page and "Safe next move:" in page


# --- the runs list finds a run by the scenario name its row shows ------------------------------------------


def _listed(client, q: str) -> set[str]:
    page = client.get(reverse("sidewisp:runs"), {"q": q}).content.decode()
    return set(re.findall(r'id="run-row-(\d+)"', page))


def test_searching_for_the_scenario_name_a_row_shows_finds_those_runs(client, owner):
    purchases = {str(create_run("healthy_purchase").pk) for _ in range(2)}
    create_run("route_rejected")
    client.force_login(owner)

    assert _listed(client, "healthy_purchase") == purchases
    assert _listed(client, "PURCHASE") == purchases  # any case, any part of the name


def test_the_scenario_search_reads_a_trigram_index_on_postgresql():
    from django.db import connection

    from receipts.queries import dashboard

    if connection.vendor != "postgresql":
        pytest.skip("the trigram index is PostgreSQL's")
    query = dashboard.runs(dashboard.RunFilters(q="purchase"))
    sql, params = query.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")  # a few test rows: a scan would be cheaper than any index
        try:
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")

    assert "run_scenario_trgm" in plan


# --- the confirm page: the decision first, the keyboard in its form ------------------------------------------


def test_the_confirm_page_puts_the_decision_and_its_button_above_the_details(client, owner, wait):
    client.force_login(owner)

    page = client.get(reverse("sidewisp:confirm", args=["approve", wait.pk])).content.decode()

    approve, details = page.index('data-confirm="approve"'), page.index('id="details-title"')
    assert page.index("Approving lets <code>place_order</code> run") < approve < details
    assert details < page.index("data-arg-values")  # the arguments stay, below the decision
    assert page.index('data-action="reject">Reject instead…') < details
    assert '<form method="post" action="' in page and 'id="confirm-form" tabindex="-1" autofocus' in page


def test_the_reject_page_offers_approve_instead(client, owner, wait):
    client.force_login(owner)

    page = client.get(reverse("sidewisp:confirm", args=["reject", wait.pk])).content.decode()

    assert page.index('data-action="approve">Approve instead…') < page.index('id="details-title"')


# --- redirect after POST: reloading a decision's result page never decides again ---------------------------


@pytest.mark.parametrize("kind", ["reject", "approve"])
def test_a_decisions_result_page_is_a_redirect_and_reloading_it_sends_nothing(client, owner, wait, monkeypatch, kind):
    from agents import tasks

    monkeypatch.setattr(tasks.resume_run, "delay", lambda pk: None)
    client.force_login(owner)
    data = {"decision": kind, "token": wait.wait_part["resume_token_id"], "key": uuid.uuid4().hex}

    posted = client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), {**data, "reason": "over budget"})
    assert posted.status_code == 303
    shown, reloaded = client.get(posted["Location"]), client.get(posted["Location"])

    for page in (shown, reloaded):
        assert page.status_code == 200
        assert '<h1 id="result-title">Done</h1>' in page.content.decode()
    assert Decision.objects.count() == 1
    assert AuditEntry.objects.filter(action=f"wait.{kind}").count() == 1
    assert "over budget" not in str(client.session.items())  # the reason stays in the audit log only


def test_another_session_cannot_open_someone_elses_result_page(client, owner, wait, person, monkeypatch):
    from agents import tasks

    monkeypatch.setattr(tasks.resume_run, "delay", lambda pk: None)
    client.force_login(owner)
    data = {"decision": "approve", "token": wait.wait_part["resume_token_id"], "key": uuid.uuid4().hex}
    location = client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), data)["Location"]
    client.logout()
    client.force_login(person("other-lead", "approver"))

    assert client.get(location).status_code == 404
