"""A run's timeline (waterfall): one lane per agent, a bar for each agent turn, wait, handoff and tool call.

`build` is pure: receipts as `Step`s in, `Timeline` out (lanes, bars, the span and the current moment). The
stored receipts say when each step happened (their `recorded_at`), who sent and who received each handoff:

- a handoff bar, in its sender's lane, from `created` (the transfer tool was called) until `destination`
  (the receiver started), or `reduced` when the receiver never started;
- a turn bar: the first sender's from the run's start until its first transfer; a receiver's from its start
  (or the end of its wait) until its next transfer, its wait, or its `final_status` claim;
- a wait bar, in its receiver's lane, from the `wait` receipt until the one that says it was decided;
- a tool bar, in its agent's lane, from the start to the end of a tool call that is no transfer, as its
  `tool_call` report says (sidewisp_agent.toolcalls); a failed call is marked.

A step still open is drawn until `now` when the run is running (and marked open), else until the run's end.
`for_run` reads the receipts in one query (at most MAX_RECEIPTS, oldest first) and the tool calls in one more
(at most MAX_TOOL_CALLS, oldest first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

MAX_RECEIPTS = 2000
MAX_TOOL_CALLS = 2000
KINDS = {"turn": "Turn", "wait": "Wait", "handoff": "Handoff", "tool": "Tool call"}
IN_PROGRESS = "IN_PROGRESS"  # an unsettled handoff's verdict that still waits for a part (receipts.ingest.due)


@dataclass(frozen=True)
class Step:
    """One receipt as the timeline reads it."""

    at: datetime
    part: str  # created, reduced, destination, wait, verification, final_status
    handoff_id: str
    sender: str
    receiver: str
    verdict: str  # the handoff's verdict now, or IN_PROGRESS while a part it needs is still due
    anchor: str  # the history entry it is (`history-receipt-<pk>`)
    resolved: bool = False  # a wait receipt that says the wait was decided


@dataclass(frozen=True)
class ToolCall:
    """One `tool_call` report as the timeline reads it: when the call ran, and its history entry."""

    agent: str
    tool: str
    start: datetime
    end: datetime
    outcome: str  # ok, error, rejected
    anchor: str  # the history entry it is (`history-report-<pk>`)
    at: datetime  # when the report was recorded: its place in the history


@dataclass
class Bar:
    kind: str  # turn, wait, handoff, tool
    lane: str  # the agent
    start: datetime
    end: datetime
    verdict: str
    anchor: str  # the history entry it starts at
    end_anchor: str = ""  # the history entry it ends at ("" when it is still open)
    handoff_id: str = ""
    open: bool = False  # still going on at `now`
    tool: str = ""  # a tool bar's tool
    failed: bool = False  # a tool bar whose call raised or answered with an error

    @property
    def duration(self) -> timedelta:
        return self.end - self.start


@dataclass
class Lane:
    agent: str
    bars: list[Bar] = field(default_factory=list)


@dataclass
class Timeline:
    lanes: list[Lane]
    start: datetime
    end: datetime
    now: datetime | None  # the current moment, on a running run only
    times: dict[str, datetime] = field(default_factory=dict)  # each step's time, by its anchor

    @property
    def bars(self) -> list[Bar]:
        return [bar for lane in self.lanes for bar in lane.bars]

    def took(self) -> dict[str, Bar]:
        """The bar that ends at each history entry (by anchor): what that entry closed and how long it took."""
        return {bar.end_anchor: bar for bar in self.bars if bar.end_anchor}


def build(
    steps: list[Step], *, start: datetime, end: datetime, running: bool, tools: Sequence[ToolCall] = ()
) -> Timeline:
    """The lanes and bars of `steps` and `tools`, between the run's `start` and `end` (`now` if running).

    A tool bar is drawn over its agent's turn; an agent with tool calls only gets a lane after the others."""
    lanes: dict[str, Lane] = {}
    turns: dict[str, tuple[datetime, str, str]] = {}  # agent -> (since, anchor, verdict) of its open turn
    transfers: dict[str, tuple[Step, Bar | None]] = {}  # handoff id -> its created step, its closed bar
    waits: dict[str, Bar] = {}  # handoff id -> its open wait

    def lane(agent: str) -> Lane:
        return lanes.setdefault(agent, Lane(agent))

    def close_turn(agent: str, step: Step, verdict: str) -> None:
        since, anchor, _ = turns.pop(agent, (None, "", ""))
        if since is None and not any(b.kind == "turn" for b in lane(agent).bars) and not transfers_seen(agent):
            since, anchor = start, step.anchor  # the first sender's turn began with the run
        if since is not None:
            lane(agent).bars.append(Bar("turn", agent, since, step.at, verdict, anchor, step.anchor, step.handoff_id))

    def transfers_seen(agent: str) -> bool:
        return any(s.receiver == agent for s, _ in transfers.values())

    for step in sorted(steps, key=lambda s: s.at):
        sender, receiver = step.sender or "unknown agent", step.receiver or "unknown agent"
        if step.part == "created":
            close_turn(sender, step, step.verdict)
            transfers.setdefault(step.handoff_id, (step, None))
        elif step.part in ("reduced", "destination"):
            created, bar = transfers.get(step.handoff_id, (None, None))
            if created is None:
                continue
            if bar is None:
                bar = Bar("handoff", sender, created.at, step.at, step.verdict, created.anchor, step.anchor)
                bar.handoff_id = step.handoff_id
                lane(sender).bars.append(bar)
                transfers[step.handoff_id] = (created, bar)
            else:
                bar.end, bar.end_anchor = step.at, step.anchor
            if step.part == "destination":
                turns[receiver] = (step.at, step.anchor, step.verdict)
        elif step.part == "wait" and not step.resolved:
            close_turn(receiver, step, step.verdict)
            bar = Bar("wait", receiver, step.at, step.at, step.verdict, step.anchor, "", step.handoff_id, open=True)
            lane(receiver).bars.append(bar)
            waits[step.handoff_id] = bar
        elif step.part == "wait":
            bar = waits.pop(step.handoff_id, None)
            if bar is not None:
                bar.end, bar.end_anchor, bar.open = step.at, step.anchor, False
            turns[receiver] = (step.at, step.anchor, step.verdict)
        elif step.part == "final_status":
            close_turn(receiver, step, step.verdict)

    for agent, (since, anchor, verdict) in turns.items():
        lane(agent).bars.append(Bar("turn", agent, since, end, verdict, anchor, "", open=running))
    for bar in waits.values():
        bar.end, bar.open = max(end, bar.start), running
    for call in sorted(tools, key=lambda c: c.start):
        bar = Bar("tool", call.agent, call.start, max(call.end, call.start), "", call.anchor, call.anchor)
        bar.tool, bar.failed = call.tool, call.outcome == "error"
        lane(call.agent or "unknown agent").bars.append(bar)
    last = max([end, start, *(b.end for lane_ in lanes.values() for b in lane_.bars)])
    times = {step.anchor: step.at for step in steps} | {call.anchor: call.at for call in tools}
    return Timeline(list(lanes.values()), start, last, end if running else None, times)


def for_run(run, now: datetime) -> Timeline:
    """`run`'s timeline from its stored receipts (one query).

    The rows are the columns a step reads (no model instances: a run page's history renders it live, and its
    receipts with their handoffs as instances were 5 of its render's 45 ms of CPU); whether a handoff is in
    progress is `due_condition`, `due_part`'s rule in SQL."""
    from django.db.models import BooleanField, ExpressionWrapper

    from receipts.ingest.due import due_condition
    from receipts.models import Receipt

    rows = (
        Receipt.objects.filter(handoff__run=run)
        .annotate(in_progress=ExpressionWrapper(due_condition("handoff__"), output_field=BooleanField()))
        .order_by("recorded_at", "pk")
        .values_list(
            "pk",
            "recorded_at",
            "part",
            "handoff__handoff_id",
            "handoff__sender",
            "handoff__receiver",
            "handoff__verdict",
            "in_progress",
            "payload__resolved",
        )
    )
    steps = [
        Step(
            at,
            part,
            handoff_id,
            sender,
            receiver,
            IN_PROGRESS if in_progress else verdict,
            f"history-receipt-{pk}",
            resolved=part == "wait" and resolved is True,
        )
        for pk, at, part, handoff_id, sender, receiver, verdict, in_progress, resolved in rows[:MAX_RECEIPTS]
    ]
    tools = tool_calls(run)
    start = run.started_at or run.created_at
    start = min([start, *(s.at for s in steps[:1]), *(c.start for c in tools[:1])])
    running = run.status in ("queued", "running", "waiting")
    end = now if running else (run.finished_at or (steps[-1].at if steps else start))
    return build(steps, start=start, end=max(end, start), running=running, tools=tools)


def tool_calls(run) -> list[ToolCall]:
    """`run`'s timed tool calls from their `tool_call` reports (one query); a report without both times is left out."""
    from receipts.models import MiddlewareReport

    rows = MiddlewareReport.objects.filter(run=run, kind=MiddlewareReport.Kind.TOOL_CALL).order_by("recorded_at", "pk")
    calls = []
    for pk, agent, detail, at in rows.values_list("pk", "agent", "detail", "recorded_at")[:MAX_TOOL_CALLS]:
        detail = detail if isinstance(detail, dict) else {}
        began, ended = _moment(detail.get("started_at")), _moment(detail.get("ended_at"))
        if began is None or ended is None:
            continue
        outcome = str(detail.get("outcome") or "")
        calls.append(
            ToolCall(
                agent, str(detail.get("tool") or "unknown tool"), began, ended, outcome, f"history-report-{pk}", at
            )
        )
    return sorted(calls, key=lambda c: c.start)


def _moment(value: object) -> datetime | None:
    """An ISO time with its zone, or None (a naive or malformed time cannot be placed)."""
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None
