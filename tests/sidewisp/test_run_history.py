"""The run's history (issue 21 §1): everything that happened to a run, in order, on its page and its own.

Personas: an approver who owns the wait (ops-lead), an operator (oncall), a viewer (watcher).
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import execution
from receipts.ingest import broadcast
from receipts.models import AuditEntry, Decision, MiddlewareReport, OutboxIntent, Run, TaskDelivery
from receipts.queries import history
from receipts.workers import deliveries
from receipts.workers.deliveries import Carrier

PLANTED_SKU = "PLANTED-sku-value-7f3a"


def key() -> str:
    return uuid.uuid4().hex


def text(response) -> str:
    assert response.status_code == 200, response.status_code
    return unescape(response.content.decode())


def kinds(page: str) -> list[str]:
    return re.findall(r'class="row history-entry" id="history-([a-z]+)-\d+"', page)


def history_url(run: Run, **query) -> str:
    base = reverse("sidewisp:run-history", args=[run.pk])
    return f"{base}?{'&'.join(f'{k}={v}' for k, v in query.items())}" if query else base


@pytest.fixture
def people(person):
    return {
        "owner": person("ops-lead", "approver"),
        "operator": person("oncall", "operator"),
        "viewer": person("watcher", "viewer"),
    }


# --- a hosted run, driven by the real graph: receipts, verdicts, a wait edited and applied -----------------


@pytest.fixture
def edited_run(transactional_db, people, client, monkeypatch):
    """A demo run that waited for ops-lead, who edited its order (quantity 7, a planted sku), then resumed."""
    from agents import tasks

    install_team_contracts()
    monkeypatch.setattr(broadcast, "publish", lambda event: True)
    monkeypatch.setattr(tasks.resume_run, "delay", lambda pk: None)
    monkeypatch.setattr(tasks.start_run, "delay", lambda pk: None)
    run = create_run("waiting_on_approval")
    execution.start(run.pk, Carrier(task_id="task-start-1", worker="celery@worker-a"))
    wait = run.handoffs.get()
    client.force_login(people["owner"])
    data = {"decision": "edit", "token": wait.wait_part["resume_token_id"], "key": key(), "reason": "one less"}
    response = client.post(
        reverse("sidewisp:wait-decide", args=[wait.pk]),
        {**data, "arg_quantity": "7", "arg_sku": PLANTED_SKU},
        follow=True,  # to the result page, wherever the decision's POST sends the browser
    )
    assert response.status_code == 200, response.content.decode()
    decision = Decision.objects.get()
    execution.resume(decision.pk, Carrier(task_id="task-resume-1", worker="celery@worker-b"))
    run.refresh_from_db()
    return run, wait, response


def entry_times(page: str) -> list[str]:
    found = r'class="row history-entry"[^>]*>\s*<span class="cell-time">.*?<time[^>]*datetime="([^"]+)"'
    return re.findall(found, page)


def test_the_history_shows_every_kind_of_entry_oldest_first_and_newest_first_on_request(edited_run, client):
    # issue 30 §1: oldest first by default (it was newest first), newest first is a toggle.
    run, _, _ = edited_run

    page = text(client.get(history_url(run)))
    newest = text(client.get(history_url(run, order="newest")))

    shown = kinds(page)
    assert {"receipt", "verdict", "decided", "applied", "audit", "intent", "delivery"} <= set(shown)
    times = entry_times(page)
    assert times and times == sorted(times)
    assert entry_times(newest) == sorted(times, reverse=True)
    assert '<strong aria-current="true">oldest first</strong>' in page and 'order=newest">newest first</a>' in page
    assert "wait opened, owner <strong>ops-lead</strong>, reason <code>purchase_approval</code>" in page
    assert "Wait approved with edited arguments</strong> by ops-lead" in page
    assert "ops-lead: <code>wait.edit</code> — Done</strong>" in page and "why: one less" in page
    assert "to worker <code>celery@worker-a</code>, attempt 1" in page
    assert "Delivered: resume task</strong> <code>task-resume-1</code>" in page


def test_an_edit_names_the_arguments_it_changed_and_its_result_never_their_values(edited_run, client):
    run, _, _ = edited_run

    page = text(client.get(history_url(run)))

    assert "changed arguments: <code>quantity</code>, <code>sku</code>" in page
    assert "Result: worker <code>celery@worker-b</code> ran the resume (attempt 1" in page
    assert PLANTED_SKU not in page and "server" not in page  # the edited value, the original tool argument
    assert PLANTED_SKU not in text(client.get(reverse("sidewisp:run-detail", args=[run.pk])))


def test_the_result_page_links_to_its_entry_and_the_entry_back_to_the_audit_row(edited_run, client, people):
    _, _, response = edited_run
    entry = AuditEntry.objects.get(action="wait.edit", outcome="done")

    link = re.search(
        r'<a href="([^"]+)">See this action in the run\'s history</a>', unescape(response.content.decode())
    )
    assert link and link.group(1).endswith(f"#history-audit-{entry.pk}")
    page = text(client.get(link.group(1).split("#")[0]))
    assert f'id="history-audit-{entry.pk}"' in page
    assert "audit row" not in page  # an approver may not read the audit log: no dead link
    client.force_login(people["operator"])  # who may
    page = text(client.get(link.group(1).split("#")[0]))
    back = re.search(rf'id="history-audit-{entry.pk}".*?<a href="([^"]+)">audit row</a>', page, re.S).group(1)
    assert back.endswith(f"#audit-{entry.pk}")
    audit = text(client.get(back.split("#")[0]))
    assert f'id="audit-{entry.pk}"' in audit


def test_the_history_filters_by_handoff(edited_run, client):
    run, wait, _ = edited_run
    other = run.handoffs.exclude(pk=wait.pk).first()

    page = text(client.get(history_url(run, handoff=wait.handoff_id)))

    assert set(kinds(page)) >= {"receipt", "verdict", "decided", "audit"}
    assert "delivery" not in kinds(page) and "intent" not in kinds(page)  # about the run, not the handoff
    assert set(re.findall(r'data-handoff="([^"]+)"', page)) == {wait.handoff_id}
    if other is not None:
        assert other.handoff_id not in re.findall(r'data-handoff="([^"]+)"', page)


def test_the_run_page_has_the_history_section_and_a_viewer_gets_no_audit_links(edited_run, client, people):
    run, _, _ = edited_run
    client.force_login(people["viewer"])

    page = text(client.get(reverse("sidewisp:run-detail", args=[run.pk])))

    assert f'id="run-{run.pk}-history"' in page and "history-entry" in page
    assert "audit row" not in page  # a viewer may not read the audit log: no dead link


# --- operator actions and their results (the worker's delivery of what they promised) --------------------------


@pytest.fixture
def parked(scenario_handoff):
    run = scenario_handoff("stale_control", scenario="stale_control").run
    Run.objects.filter(pk=run.pk).update(status=Run.Status.PARKED)
    run.refresh_from_db()
    return run


def _carry_out(intent: OutboxIntent, outcome: str, *, worker: str = "celery@worker-c") -> TaskDelivery:
    """What the worker does with a promised intent: take it, drive the run, end with `outcome`."""
    run = Run.objects.get(pk=intent.run_id)
    delivery = deliveries.begin(run, intent.kind, intent.object_id, Carrier(task_id=f"task-{intent.pk}", worker=worker))
    deliveries.end(delivery, outcome)
    return delivery


def test_a_retry_shows_who_why_and_the_new_attempt_and_how_it_ended(client, people, parked):
    client.force_login(people["operator"])
    client.post(reverse("sidewisp:run-retry", args=[parked.pk]), {"key": key(), "reason": "lease expired"})
    entry = AuditEntry.objects.get(action="run.retry", outcome="done")
    _carry_out(OutboxIntent.objects.get(kind="start", run=parked), "complete")

    item = _entry(text(client.get(history_url(parked))), f"history-audit-{entry.pk}")

    assert "oncall: <code>run.retry</code> — Done" in item and "why: lease expired" in item
    assert "status before: parked" in item
    assert "Result: worker <code>celery@worker-c</code> ran the start (attempt 1" in item
    assert "<strong>complete</strong>" in item


def test_a_verify_again_shows_its_re_verification_and_verdict(client, people, scenario_handoff):
    false = scenario_handoff("false_complete", scenario="false_complete")
    client.force_login(people["operator"])
    client.post(reverse("sidewisp:task-verify", args=[false.pk]), {"key": key(), "reason": "customer says no order"})
    entry = AuditEntry.objects.get(action="task.verify", outcome="done")
    _carry_out(OutboxIntent.objects.get(kind="reverify", run=false.run), "fail")

    item = _entry(text(client.get(history_url(false.run))), f"history-audit-{entry.pk}")

    assert "oncall: <code>task.verify</code> — Done" in item and "why: customer says no order" in item
    assert "ran the reverify (attempt 1" in item and "<strong>fail</strong>, verdict False complete" in item


def test_a_redelivered_task_is_shown_as_such(parked, viewer_client):
    first = deliveries.begin(parked, "start", parked.pk, Carrier(task_id="t-1", worker="celery@a"))
    again = deliveries.begin(parked, "start", parked.pk, Carrier(task_id="t-1", worker="celery@b"))

    page = text(viewer_client.get(history_url(parked)))

    assert (first.attempt, first.redelivered, again.attempt, again.redelivered) == (1, False, 2, True)
    assert "Redelivered: start task</strong> <code>t-1</code> to worker <code>celery@b</code>, attempt 2" in page
    assert "to worker <code>celery@a</code>, attempt 1 · not finished" in page


def _entry(page: str, anchor: str) -> str:
    found = re.search(rf'<li class="row history-entry" id="{anchor}".*?</li>', page, re.S)
    assert found, anchor
    return found.group(0)


# --- pages and query counts -----------------------------------------------------------------------------------


def _reports(run: Run, n: int) -> None:
    start = timezone.now() - timedelta(hours=1)
    MiddlewareReport.objects.bulk_create(
        MiddlewareReport(
            run=run,
            agent="sales",
            kind="tool_error",
            detail={"tool": "shell"},
            attempt=f"a-{i}",
            recorded_at=start + timedelta(seconds=i),
        )
        for i in range(n)
    )


def test_the_cursor_pages_through_every_entry_once_in_order(record_handoff):
    handoff = record_handoff("h-pages", "op-pages", "healthy")
    _reports(handoff.run, 30)
    everything = history.page(handoff.run, size=1000).entries

    seen, cursor = [], None
    while True:
        page = history.page(handoff.run, older=cursor, size=7)
        seen += page.entries
        if page.older is None:
            break
        cursor = history.Cursor.parse(str(page.older))

    assert [e.anchor for e in seen] == [e.anchor for e in everything]
    assert len(seen) == len({e.anchor for e in seen}) > 30


def test_oldest_first_pages_through_every_entry_once_numbered_from_one(record_handoff):
    handoff = record_handoff("h-pages", "op-pages", "healthy")
    _reports(handoff.run, 30)
    everything = history.page(handoff.run, size=1000).entries[::-1]

    seen, cursor = [], None
    while True:
        page = history.page(handoff.run, newer=cursor, size=7, newest_first=False)
        seen += page.entries
        if page.newer is None:
            break
        cursor = history.Cursor.parse(str(page.newer))

    assert [e.anchor for e in seen] == [e.anchor for e in everything]
    assert [e.seq for e in seen] == list(range(1, len(everything) + 1))
    assert [e.seq for e in everything] == list(range(1, len(everything) + 1))


def test_the_newest_entries_are_numbered_by_the_queries_that_read_them(record_handoff):
    # The run page's live section reads the newest entries on every change of its run: their sequence numbers
    # come with them (a window count per source), not from a count of the whole history of its own.
    run = record_handoff("h-newest", "op-newest", "healthy").run
    _reports(run, 30)
    total = len(history.page(run, size=history.MAX_PAGE_SIZE).entries)

    with CaptureQueriesContext(connection) as queries:
        newest = history.page(run, size=20)

    assert [e.seq for e in newest.entries] == list(range(total, total - 20, -1))
    assert not [q for q in queries if q["sql"].startswith("SELECT COUNT(*)")]


@pytest.mark.parametrize(("order", "link"), [("newest", "Older entries"), ("oldest", "Newer entries")])
def test_the_history_page_links_to_the_next_entries_by_cursor(record_handoff, viewer_client, order, link):
    run = record_handoff("h-older", "op-older", "healthy").run
    _reports(run, 40)

    first = text(viewer_client.get(history_url(run, order=order)))
    following = re.search(rf'<a href="([^"]+)" rel="next">{link}', first).group(1)
    second = text(viewer_client.get(following.replace("&amp;", "&")))

    assert len(kinds(first)) == history.PAGE_SIZE
    ids = [re.findall(r'id="(history-[a-z]+-\d+)"', page) for page in (first, second)]
    assert set(ids[0]).isdisjoint(ids[1])
    seqs = [int(n) for page in (first, second) for n in re.findall(r'data-seq="(\d+)"', page)]
    total = len(history.page(run, size=history.MAX_PAGE_SIZE).entries)
    # Numbered in the whole history, 1 the oldest, across pages.
    expected = range(1, len(seqs) + 1) if order == "oldest" else range(total, total - len(seqs), -1)
    assert total > history.PAGE_SIZE and seqs == list(expected)


def test_a_cursor_it_did_not_write_is_refused(record_handoff, viewer_client):
    run = record_handoff("h-bad", "op-bad", "healthy").run

    assert viewer_client.get(history_url(run, before="yesterday")).status_code == 400
    assert viewer_client.get(history_url(run, handoff="nobody")).status_code == 404


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


def test_the_history_runs_as_many_queries_for_50_entries_as_for_5(record_handoff, viewer_client):
    few = record_handoff("h-few", "op-few", "healthy").run
    many = record_handoff("h-many", "op-many", "healthy").run
    _reports(many, 45)
    for run in (few, many):
        AuditEntry.objects.create(
            actor_name="oncall", action="run.stop", object_type="run", object_id=str(run.pk), outcome="done", run=run
        )
        deliveries.begin(run, "start", run.pk, Carrier(task_id=f"t-{run.pk}", worker="celery@a"))
    assert len(history.page(few, size=100).entries) <= 10 < 50 <= len(history.page(many, size=100).entries)

    for name in ("sidewisp:run-history", "sidewisp:run-detail"):
        for query in ("", "?order=newest"):
            counts = [_queries(viewer_client, reverse(name, args=[run.pk]) + query) for run in (many, few)]
            assert counts[0] == counts[1], (name, query)


# --- live: the run page's socket swaps the history section with the new entries --------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_receipt_recorded_while_the_run_page_is_open_appears_in_its_history(viewer, record_handoff):
    from channels.db import database_sync_to_async

    from receipts.ingest.recording import record
    from receipts.models import Receipt
    from tests.sidewisp.test_consumer import ORIGIN, TIMEOUT, receive_until, run_async, session_cookie, socket

    handoff = record_handoff("h-live", "op-live", "waiting")
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket(f"/ws/health/?page=run&run={handoff.run_id}", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        first = await communicator.receive_from(timeout=TIMEOUT)
        assert f'id="run-{handoff.run_id}-history"' in first
        await database_sync_to_async(record)(
            handoff_id="h-live", operation_id="op-live", part="final_status", value="complete", attempt="2"
        )
        receipt = await database_sync_to_async(Receipt.objects.filter(handoff=handoff).latest)("recorded_at", "pk")
        message = await receive_until(communicator, f'id="history-receipt-{receipt.pk}"')
        assert f'<section class="card history" id="run-{handoff.run_id}-history"' in message
        assert 'hx-swap-oob="true"' in message and f'id="history-receipt-{receipt.pk}"' not in first
        await communicator.disconnect()

    run_async(body)


def test_the_result_page_shows_the_runs_history_with_the_new_entry(client, people, parked):
    client.force_login(people["operator"])

    page = text(client.post(reverse("sidewisp:run-retry", args=[parked.pk]), {"key": key(), "reason": "stuck"}))

    entry = AuditEntry.objects.get(action="run.retry", outcome="done")
    assert f'id="run-{parked.pk}-history"' in page and f'id="history-audit-{entry.pk}"' in page
