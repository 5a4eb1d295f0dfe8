"""The run's timeline (issue 30 §1): the pure model (steps in, lanes and bars out), its drawing, its place on the run
page and its query count.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts.models import Receipt
from receipts.queries import timeline
from receipts.queries.timeline import Step
from sidewisp.pages import history_words
from sidewisp.pages import timeline as drawing

T0 = datetime(2026, 7, 30, 10, 0, 0, tzinfo=UTC)


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def step(ms: int, part: str, hid: str, sender: str, receiver: str, verdict: str = "HEALTHY", **kw) -> Step:
    return Step(at(ms), part, hid, sender, receiver, verdict, f"history-receipt-{ms}", **kw)


# triage hands h-1 to sales, which waits for a person, then hands h-2 to billing, which claims it is done.
STEPS = [
    step(1000, "created", "h-1", "triage", "sales"),
    step(1010, "reduced", "h-1", "triage", "sales"),
    step(1200, "destination", "h-1", "triage", "sales"),
    step(3000, "wait", "h-1", "triage", "sales", "WAITING_ON_APPROVAL"),
    step(9000, "wait", "h-1", "triage", "sales", "WAITING_ON_APPROVAL", resolved=True),
    step(9500, "created", "h-2", "sales", "billing", "FALSE_COMPLETE"),
    step(9600, "reduced", "h-2", "sales", "billing", "FALSE_COMPLETE"),
    step(9700, "destination", "h-2", "sales", "billing", "FALSE_COMPLETE"),
    step(12000, "final_status", "h-2", "sales", "billing", "FALSE_COMPLETE"),
]


def shape(tl: timeline.Timeline) -> list[tuple]:
    return [(b.lane, b.kind, b.start, b.end, b.verdict, b.open) for b in tl.bars]


def test_one_lane_per_agent_and_a_bar_per_turn_wait_and_handoff_in_order():
    tl = timeline.build(STEPS, start=T0, end=at(12000), running=False)

    assert [lane.agent for lane in tl.lanes] == ["triage", "sales", "billing"]
    assert shape(tl) == [
        ("triage", "turn", T0, at(1000), "HEALTHY", False),  # the first sender's turn began with the run
        ("triage", "handoff", at(1000), at(1200), "HEALTHY", False),  # transfer called .. receiver started
        ("sales", "turn", at(1200), at(3000), "WAITING_ON_APPROVAL", False),
        ("sales", "wait", at(3000), at(9000), "WAITING_ON_APPROVAL", False),
        ("sales", "turn", at(9000), at(9500), "FALSE_COMPLETE", False),  # its turn after the decision
        ("sales", "handoff", at(9500), at(9700), "FALSE_COMPLETE", False),
        ("billing", "turn", at(9700), at(12000), "FALSE_COMPLETE", False),
    ]
    assert tl.now is None  # a finished run has no "now" line


def test_each_bar_starts_and_ends_at_its_entries_and_took_names_the_entry_that_closed_it():
    tl = timeline.build(STEPS, start=T0, end=at(12000), running=False)

    wait = next(b for b in tl.bars if b.kind == "wait")
    assert (wait.anchor, wait.end_anchor) == ("history-receipt-3000", "history-receipt-9000")
    assert tl.took()["history-receipt-9000"] is wait and wait.duration == timedelta(seconds=6)
    assert tl.took()["history-receipt-1200"].kind == "handoff"
    assert tl.times["history-receipt-9500"] == at(9500)


def test_on_a_running_run_open_steps_reach_now_and_are_marked_open():
    now = at(5000)
    tl = timeline.build(STEPS[:4], start=T0, end=now, running=True)

    wait = tl.bars[-1]
    assert (wait.kind, wait.end, wait.open) == ("wait", now, True)
    assert tl.now == now and tl.end == now


def test_a_receiver_that_never_started_leaves_a_handoff_bar_until_its_reduced_receipt():
    steps = [step(100, "created", "h-9", "a", "b", "DESTINATION_NOT_STARTED")]
    steps.append(step(150, "reduced", "h-9", "a", "b", "DESTINATION_NOT_STARTED"))
    tl = timeline.build(steps, start=T0, end=at(400), running=False)

    assert [(b.kind, b.end) for b in tl.bars] == [("turn", at(100)), ("handoff", at(150))]
    assert [lane.agent for lane in tl.lanes] == ["a"]  # b never ran: no lane of its own


def test_no_steps_no_lanes():
    tl = timeline.build([], start=T0, end=at(10), running=True)
    assert tl.lanes == [] and tl.bars == []


def test_the_drawing_places_bars_in_time_and_says_each_in_words():
    tl = timeline.build(STEPS, start=T0, end=at(12000), running=False)
    drawn = drawing.drawn(tl, lambda anchor: f"#{anchor}")

    bars = [d for lane in drawn["lanes"] for d in lane["bars"]]
    assert [d.bar.kind for d in bars] == [b.kind for b in tl.bars]
    assert all(d.x >= drawing.LABEL_WIDTH and d.width >= drawing.MIN_BAR for d in bars)
    assert sorted(d.x for d in bars) == [d.x for d in sorted(bars, key=lambda d: d.bar.start)]
    wait = next(d for d in bars if d.bar.kind == "wait")
    assert (wait.tone, wait.href) == ("wait", "#history-receipt-3000")
    assert wait.text == "Wait in sales for a person (handoff h-1): 6.000 s · verdict Waiting on approval"
    assert next(d for d in bars if d.bar.lane == "billing").tone == "bad"
    assert drawn["now_x"] is None


@pytest.mark.parametrize(
    ("ms", "words"),
    [(0, "0 ms"), (12, "12 ms"), (1234, "1.234 s"), (123_456, "2 min 3.456 s"), (3_723_000, "1 h 2 min")],
)
def test_durations_in_words_to_the_millisecond(ms, words):
    assert drawing.duration(timedelta(milliseconds=ms)) == words


@pytest.mark.parametrize(
    ("code", "words"),
    [("complete-end", "at the run's end"), ("verify-2", "attempt 2"), ("1", "attempt 1"), ("open-9f3a2c", "")],
)
def test_attempts_in_words(code, words):
    assert history_words.attempt(code) == words


def test_clock_and_since():
    assert history_words.clock(at(1234)) == "2026-07-30 10:00:01.234 UTC"
    assert history_words.since(at(1234), T0) == "+1.234 s"


# --- on the page, from stored receipts -------------------------------------------------------------------------


def _page(client, run) -> str:
    response = client.get(reverse("sidewisp:run-detail", args=[run.pk]))
    assert response.status_code == 200
    return unescape(response.content.decode())


def test_the_run_page_draws_a_bar_per_turn_and_handoff_from_the_stored_receipts(record_handoff, viewer_client):
    handoff = record_handoff("h-tl", "op-tl", "healthy")
    receipts = {r.part: r for r in Receipt.objects.filter(handoff=handoff)}

    page = _page(viewer_client, handoff.run)

    svg = re.search(r"<svg class=\"timeline-svg\".*?</svg>", page, re.S).group(0)
    lanes = re.findall(r'<g class="tl-lane" data-lane="([^"]+)"', svg)
    assert lanes == [handoff.sender, handoff.receiver]
    bars = re.findall(r'href="#history-receipt-(\d+)"[^>]*><rect class="tl-bar tl-(\w+) tone-(\w+)', svg)
    assert (str(receipts["created"].pk), "handoff", "ok") in bars
    assert (str(receipts["destination"].pk), "turn", "ok") in bars
    assert f'id="history-receipt-{receipts["destination"].pk}"' in page  # the bar's entry is on the page


def _queries(client, run) -> int:
    with CaptureQueriesContext(connection) as queries:
        _page(client, run)
    return len(queries)


def test_the_timeline_costs_the_same_queries_for_many_receipts_as_for_few(record_handoff, viewer_client):
    few = record_handoff("h-few", "op-few", "healthy").run
    many = record_handoff("h-many-0", "op-many", "healthy").run
    for i in range(1, 12):
        record_handoff(f"h-many-{i}", "op-many", "healthy")
    assert Receipt.objects.filter(handoff__run=many).count() > 5 * Receipt.objects.filter(handoff__run=few).count()

    assert _queries(viewer_client, many) == _queries(viewer_client, few)


@pytest.mark.django_db(transaction=True)
def test_the_timeline_grows_live_over_the_run_pages_socket(viewer, record_handoff):
    from channels.db import database_sync_to_async

    from receipts.ingest.recording import record
    from tests.sidewisp.test_consumer import ORIGIN, TIMEOUT, receive_until, run_async, session_cookie, socket

    handoff = record_handoff("h-tl-live", "op-tl-live", "waiting")
    cookie = session_cookie(viewer)

    async def body():
        communicator = socket(f"/ws/health/?page=run&run={handoff.run_id}", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        first = await communicator.receive_from(timeout=TIMEOUT)
        assert f'id="run-{handoff.run_id}-timeline"' in first and "tl-wait tone-" in first
        decided = {**handoff.wait_part, "resolved": True, "resolution": "approved"}
        await database_sync_to_async(record)(
            handoff_id="h-tl-live", operation_id="op-tl-live", part="wait", value=decided, attempt="decided-1"
        )
        receipt = await database_sync_to_async(Receipt.objects.filter(handoff=handoff).latest)("recorded_at", "pk")
        # The wait's end starts the receiver's next turn: a bar that links to the new entry.
        message = await receive_until(communicator, f'href="#history-receipt-{receipt.pk}"')
        assert f'id="run-{handoff.run_id}-timeline"' in message
        assert f'href="#history-receipt-{receipt.pk}"' not in first
        await communicator.disconnect()

    run_async(body)


def test_a_bar_whose_entry_is_on_another_page_links_to_the_page_that_starts_at_it(record_handoff, viewer_client):
    from tests.sidewisp.test_run_history import _reports

    handoff = record_handoff("h-tl-far", "op-tl-far", "healthy")
    _reports(handoff.run, 40)  # an hour older than the receipts: the first page (oldest first) is all reports
    url = reverse("sidewisp:run-history", args=[handoff.run_id])
    page = unescape(viewer_client.get(url).content.decode())

    links = re.findall(r'<a class="tl-link" href="([^"]+)"', page)
    assert links and all("?after=" in link for link in links)
    for link in links:
        path, _, anchor = link.partition("#")
        target = unescape(viewer_client.get(path.replace("&amp;", "&")).content.decode())
        assert re.search(rf'<li class="row history-entry" id="{anchor}"', target), link


def test_the_history_says_each_step_in_words(contracts, viewer_client):
    from receipts.ingest.recording import record
    from tests.conftest import handoff_parts

    part, value = handoff_parts("healthy")[0]  # the created receipt alone: its reduced is still due
    handoff = record(handoff_id="h-tl-words", operation_id="op-tl-words", part=part, value=value).handoff
    page = unescape(viewer_client.get(reverse("sidewisp:run-history", args=[handoff.run_id])).content.decode())

    entries = re.findall(r'<li class="row history-entry".*?</li>', page, re.S)
    in_progress = [e for e in entries if "data-in-progress" in e]
    assert in_progress and not any("Verdict:" in e for e in in_progress)
    assert "Transfer requested" in page and not re.search(r"attempt <code>|Receipt <code>", page)
    text = re.sub(r"<[^>]+>", "", page)
    assert not re.search(r"attempt [a-z]+-[a-z0-9]+", text)  # no "attempt complete-end"


# --- tool calls (issue 30 §1: the time each tool call took) ----------------------------------------------------


def call(agent: str, tool: str, start_ms: int, end_ms: int, outcome: str = "ok", pk: int = 1) -> timeline.ToolCall:
    return timeline.ToolCall(agent, tool, at(start_ms), at(end_ms), outcome, f"history-report-{pk}", at(end_ms + 5))


TOOLS = [
    call("sales", "check_stock", 1300, 1800, pk=1),
    call("sales", "charge_card", 2000, 2100, "error", pk=2),
    call("auditor", "log_event", 500, 520, pk=3),
]


def test_each_tool_call_is_a_bar_in_its_agents_lane_as_long_as_the_call_took():
    tl = timeline.build(STEPS, start=T0, end=at(12000), running=False, tools=TOOLS)

    tools = [(b.lane, b.tool, b.start, b.end, b.failed) for b in tl.bars if b.kind == "tool"]
    assert tools == [
        ("sales", "check_stock", at(1300), at(1800), False),
        ("sales", "charge_card", at(2000), at(2100), True),  # an error is marked
        ("auditor", "log_event", at(500), at(520), False),
    ]
    assert tl.took()["history-report-1"].duration == timedelta(milliseconds=500)  # ended - started
    assert tl.times["history-report-1"] == at(1805)  # the report's own place in the history
    # The turns, waits and handoffs are what they were; an agent with tool calls only has a lane after the others.
    assert [b for b in tl.bars if b.kind != "tool"] == timeline.build(
        STEPS, start=T0, end=at(12000), running=False
    ).bars
    assert [lane.agent for lane in tl.lanes] == ["triage", "sales", "billing", "auditor"]


def test_a_tool_bar_is_drawn_neutral_thin_and_in_words_and_a_failed_one_is_marked():
    tl = timeline.build(STEPS, start=T0, end=at(12000), running=False, tools=TOOLS)
    drawn = drawing.drawn(tl, lambda anchor: f"#{anchor}")

    bars = {d.bar.tool: d for lane in drawn["lanes"] for d in lane["bars"] if d.bar.kind == "tool"}
    ok, failed = bars["check_stock"], bars["charge_card"]
    assert (ok.tone, ok.height, ok.href) == ("muted", drawing.TOOL_HEIGHT, "#history-report-1")
    assert ok.text == "Tool call check_stock in sales: 500 ms"
    assert (failed.tone, failed.text) == ("bad", "Tool call charge_card in sales, failed: 100 ms")
    turn = next(d for lane in drawn["lanes"] for d in lane["bars"] if d.bar.lane == "sales" and d.bar.kind == "turn")
    assert ok.y + ok.height == turn.y + turn.height  # at the foot of the turn it belongs to


def _tool_call(run, agent: str, tool: str, n: int, outcome: str = "ok", ms: int = 250):
    from receipts.models import MiddlewareReport

    start = (run.started_at or run.created_at) + timedelta(seconds=n)
    detail = {
        "tool": tool,
        "call_id": f"call-{n}",
        "started_at": start.isoformat(),
        "ended_at": (start + timedelta(milliseconds=ms)).isoformat(),
        "outcome": outcome,
    }
    return MiddlewareReport.objects.create(run=run, agent=agent, kind="tool_call", detail=detail, attempt=f"call-{n}")


def test_the_run_page_draws_each_tool_call_and_its_history_says_how_long_it_took(record_handoff, viewer_client):
    handoff = record_handoff("h-tl-tools", "op-tl-tools", "healthy")
    ok = _tool_call(handoff.run, handoff.sender, "lookup_customer", 1, ms=250)
    failed = _tool_call(handoff.run, handoff.sender, "charge_card", 2, "error", ms=40)

    page = _page(viewer_client, handoff.run)

    svg = re.search(r"<svg class=\"timeline-svg\".*?</svg>", page, re.S).group(0)
    tools = re.findall(
        r'href="#history-report-(\d+)"[^>]*><rect class="tl-bar tl-tool tone-(\w+)[^"]*"[^>]*data-tool="(\w+)"', svg
    )
    assert (str(ok.pk), "muted", "lookup_customer") in tools and (str(failed.pk), "bad", "charge_card") in tools
    lane = re.search(rf'<g class="tl-lane" data-lane="{handoff.sender}">.*?</g>', svg, re.S).group(0)
    assert 'data-tool="lookup_customer"' in lane
    entry = re.search(rf'<li class="row history-entry" id="history-report-{ok.pk}".*?</li>', page, re.S).group(0)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", entry))
    assert "Tool lookup_customer returned" in text and "took 250 ms" in text
    assert "call-1" not in re.sub(r"<[^>]+>", "", page)  # the call id is no sentence of the page


def test_the_run_page_costs_the_same_queries_for_many_tool_calls_as_for_one(record_handoff, viewer_client):
    one = record_handoff("h-tc-one", "op-tc-one", "healthy")
    many = record_handoff("h-tc-many", "op-tc-many", "healthy")
    _tool_call(one.run, one.sender, "lookup_customer", 1)
    for n in range(30):
        _tool_call(many.run, many.sender, "lookup_customer", n, "error" if n % 3 else "ok")

    assert _queries(viewer_client, many.run) == _queries(viewer_client, one.run)


def _steps_from_instances(run) -> list[Step]:
    """The steps as the timeline read them before (issue 32 §3): each receipt and its handoff as model instances,
    `due_part` asked in Python."""
    from receipts.ingest.due import due_part

    rows = Receipt.objects.filter(handoff__run=run).select_related("handoff").order_by("recorded_at", "pk")
    return [
        Step(
            r.recorded_at,
            r.part,
            r.handoff.handoff_id,
            r.handoff.sender,
            r.handoff.receiver,
            timeline.IN_PROGRESS if due_part(r.handoff) else r.handoff.verdict,
            f"history-receipt-{r.pk}",
            resolved=r.part == "wait" and isinstance(r.payload, dict) and r.payload.get("resolved") is True,
        )
        for r in rows
    ]


def test_the_stored_timeline_reads_the_same_steps_as_the_receipts_instances_say(record_handoff, monkeypatch):
    """The timeline reads columns, not instances (a run page's live render): the same steps, verdicts in progress
    (`due_condition`, the SQL of `due_part`) and resolved waits included."""
    from receipts.ingest.recording import record
    from receipts.models import Run
    from tests.conftest import handoff_parts

    waiting = record_handoff("h-eq-wait", "op-eq", "waiting")
    record(
        handoff_id="h-eq-wait",
        operation_id="op-eq",
        part="wait",
        value={**waiting.wait_part, "resolved": True, "resolution": "approved"},
        attempt="decided-1",
    )
    record_handoff("h-eq-open", "op-eq", "waiting", sender="sales", receiver="triage")
    record_handoff("h-eq-ok", "op-eq", "healthy")
    record_handoff("h-eq-stale", "op-eq", "stale_control")
    created = dict(handoff_parts("healthy"))["created"]
    record(handoff_id="h-eq-due", operation_id="op-eq", part="created", value=created)  # its reduced receipt due
    run = Run.objects.get(operation_id="op-eq")
    built: list[list[Step]] = []
    real_build = timeline.build
    monkeypatch.setattr(timeline, "build", lambda steps, **kw: built.append(steps) or real_build(steps, **kw))

    timeline.for_run(run, datetime.now(UTC))

    expected = _steps_from_instances(run)
    assert built == [expected]
    verdicts = {s.verdict for s in expected}
    assert timeline.IN_PROGRESS in verdicts and len(verdicts) > 2  # in progress and final verdicts, both read
    assert [s.handoff_id for s in expected if s.resolved] == ["h-eq-wait"]
