"""Live pages under load: a change's commit → its appearance in 10 real WebSocket clients on mixed pages.

A daphne serving the app (against DATABASE_URL's database and the Redis
channel layer) has ten real WebSocket clients, logged in, on mixed pages:
three on the overview, three on the runs list, two on the waits inbox and two
on one run's page. A publisher process then offers changes at each phase's
rate for a few seconds:

- **recorded**: receipts through the real recording path (the evidence
  writer's `LocalSink`: one transaction per batch holding every receipt due
  by then, at most MAX_BATCH, its events published once after the commit; one
  new handoff per receipt, ten to a run, every WATCHED_EVERY-th on the watched
  run). It prints what was *stored* per second beside what was offered.
- **synthetic**: events only, at a true rate (a message every SYNTHETIC_TICK
  seconds with what is due), about runs that exist: the push path alone.

Each event carries its run's sequence number, and every message a page gets
names the events its render covered (the render started after the event
arrived, so after the commit). A change appeared in a client when a message
naming it arrived there; latency is from the commit (recorded) or the send
(synthetic) to that message, per (event, client) pair for every client whose
page the event concerns; "delivered" is the share of those pairs seen within
DELIVERY_SECONDS. The overview's clients also check that their verdict counts
add up to the handoffs stored. The daphne is traced (`--serve`: the hub's
methods wrapped, never changed) to say where the time goes. Figures are
printed, never judged.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench.live [--quick] [--app-dir DIR]

`--app-dir` serves another checkout of the app (e.g. `git archive` of an
earlier commit) to compare hubs; the publisher, the clients and the trace stay these.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit, urlunsplit

if __package__ in (None, ""):  # run as a script: the repository root is an import root (after PYTHONPATH's)
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from bench.sizes import is_tiny, pick
from bench.table import Row

# (mode, offered events or receipts per second)
PHASES = (("recorded", 50), ("recorded", 500), ("synthetic", 500))
PAGES = {"overview": 3, "runs": 3, "waits": 2, "run": 2}  # clients per page: ten in all
DELIVERY_SECONDS = 12.0
MAX_BATCH = 500  # receipts per transaction at most
PER_RUN = 10  # receipts (new handoffs) per run
WATCHED_EVERY = 50  # every 50th receipt is a handoff of the watched run (the run page's)
WARM_UP_RECEIPTS = 200  # stored before the clients connect, so every page has rows
SYNTHETIC_TICK = 0.01
GOAL = "p95 ≤ 300 ms at a stored 500/s with 10 pages, 100 % delivered"
COUNTS = re.compile(r'data-count="([A-Z_]+)">(\d+)<')
MARKER = re.compile(r'<div id="ws-seq" hidden data-marker="([^"]*)"')
STAGES = (
    ("published → hub", "stamp", "recv"),
    ("hub → render asked", "recv", "call"),
    ("asked → thread", "call", "start"),
    ("render", "start", "end"),
    ("render → sent", "end", "sent"),
    ("sent → client", "sent", "seen"),
)


# The render thread's own CPU time: far below the render's wall time, the render waited for a core (or the GIL).
RENDER_CPU = "of which the render thread's CPU"


@dataclass
class Phase:
    mode: str
    rate: int
    stored: float  # receipts (recorded) or events (synthetic) per second, measured
    latencies: list[float]  # seconds, per (event, client) pair delivered within DELIVERY_SECONDS
    pairs: int  # (event, client) pairs the pages should show
    counts_ok: bool | None  # the overview clients' verdict counts add up to the handoffs stored (recorded)
    stages: dict[str, list[float]]
    by_page: dict[str, tuple[list[float], list[float]]]  # page -> (latencies, the render thread's CPU)
    load: float
    seconds: float
    server_cores: float  # the daphne's CPU seconds per second while the publisher ran

    def rows(self, note: str) -> list[Row]:
        delivered = 100 * len(self.latencies) / self.pairs if self.pairs else 0.0
        what_rate = "receipts" if self.mode == "recorded" else "synthetic events (push path alone)"
        what = f"live pages, commit → visible in 10 clients (overview, runs, waits, a run), {self.rate} {what_rate}/s"
        stored = f"stored {self.stored:.0f} receipts/s" if self.mode == "recorded" else f"sent {self.stored:.0f}/s"
        figure = f"offered {self.rate}/s, {stored}; {_pcts(self.latencies)}; delivered {delivered:.1f} %"
        if self.counts_ok is not None:
            figure += "; overview counts = stored" if self.counts_ok else "; overview counts ≠ stored"
        phase_note = f"{note}, {self.seconds:.0f} s; daphne used {self.server_cores:.2f} of a core"
        phase_note += f"; load average {self.load:.2f} on {os.cpu_count()} cores"
        rows = [Row("live", what, figure, GOAL, phase_note)]
        if any(self.stages.values()):
            parts = [f"{name} {_p(values, 50)}/{_p(values, 95)}" for name, values in self.stages.items() if values]
            parts += [
                f"{page}: latency {_p(seen, 50)}/{_p(seen, 95)}, render CPU {_p(cpu, 50)}/{_p(cpu, 95)}"
                for page, (seen, cpu) in self.by_page.items()
            ]
            what = f"where the time goes at {self.rate}/s {self.mode} (p50/p95 ms per event and page)"
            rows.append(Row("live", what, "; ".join(parts), "", "from the traced daphne (bench.live --serve)"))
        return rows


def rows(quick: bool, app_dir: str | None = None) -> list[Row]:
    from django.db import connection

    from bench.environment import throwaway_database

    seconds = pick(quick, tiny=1.0, quick=3.0, full=12.0)
    with throwaway_database() as name:
        database_url = _database_url(connection, name)
        cookie = _session_cookie()
        watched = _warm_up()
        with tempfile.TemporaryDirectory() as tmp, _daphne(database_url, app_dir, Path(tmp) / "trace") as server:
            phases = asyncio.run(_measure(server, cookie, database_url, watched, seconds))
    where = f"daphne from {app_dir}" if app_dir else "daphne, this checkout"
    note = f"{where}, {connection.vendor}"
    return [row for phase in phases for row in phase.rows(note)]


# --- the server, the session and the data ------------------------------------------------


def _database_url(connection, name: str) -> str:
    from django.conf import settings

    if connection.vendor == "sqlite":
        return f"sqlite:///{name}"
    parts = urlsplit(settings.DATABASE_URL)
    return urlunsplit(parts._replace(path=f"/{name}"))


def _session_cookie() -> str:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(username="bench-viewer")
    user.user_permissions.set([Permission.objects.get(codename="view_dashboard")])
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}"


def _warm_up() -> int:
    """Rows on every page before the clients connect; the watched run's id."""
    from agents.observe.writer import LocalSink
    from receipts.models import Run

    LocalSink().write([_receipt(n, "warm") for n in range(1, WARM_UP_RECEIPTS + 1)])
    return Run.objects.get(operation_id=_watched_operation("warm")).pk


@contextmanager
def _daphne(database_url: str, app_dir: str | None, trace: Path) -> Iterator[Server]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    here = Path(__file__).resolve().parent.parent
    cwd = Path(app_dir).resolve() if app_dir else here
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": f"{cwd}{os.pathsep}{here}"}
    # As a script: with --app-dir, that checkout's app is served (PYTHONPATH first) and traced by this file.
    args = [sys.executable, str(Path(__file__).resolve()), "--serve", str(port), str(trace)]
    server = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_port(port, server)
        yield Server(port, server.pid, trace)
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()


def _wait_for_port(port: int, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            msg = f"daphne exited: {server.stderr.read()[-500:]}"
            raise RuntimeError(msg)
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    msg = "daphne did not listen within 30 s"
    raise RuntimeError(msg)


# --- clients ---------------------------------------------------------------------------


@dataclass
class Client:
    """One page: when each event was first named in a message it got, and the verdict counts it shows."""

    page: str
    run: int | None = None
    seen: dict[tuple[int, int], float] = field(default_factory=dict)
    total: int = 0  # the overview's verdict counts, added up

    def note(self, message: str) -> None:
        now = time.monotonic()
        found = MARKER.search(message)
        if found:
            for run, seqs in json.loads(found.group(1).replace("&quot;", '"')).get("seqs", []):
                for seq in seqs:
                    self.seen.setdefault((run, seq), now)
        start = message.find('id="verdict-counts"')
        if start >= 0:
            section = message[start : message.find("</section>", start)]
            self.total = sum(int(n) for _, n in COUNTS.findall(section))

    def concerned(self, event: dict) -> bool:
        """Whether this page should show `event` (as `pages.PageScope.is_affected_by` decides)."""
        if self.page == "run":
            return event["run"] == self.run
        if self.page == "waits":
            return event["type"] == "handoff.changed"
        return True

    def url(self, port: int) -> str:
        params = {"page": self.page, **({"run": str(self.run)} if self.run is not None else {})}
        return f"ws://127.0.0.1:{port}/ws/health/?{urlencode(params)}"


async def _listen(port: int, cookie: str, client: Client, ready: asyncio.Event) -> None:
    import websockets

    headers = {"Cookie": cookie}
    async with websockets.connect(
        client.url(port), origin=f"http://127.0.0.1:{port}", additional_headers=headers, max_size=None
    ) as ws:
        client.note(await ws.recv())  # the snapshot
        ready.set()
        async for message in ws:
            client.note(message if isinstance(message, str) else message.decode())


def _cpu_seconds(pid: int) -> float:
    """The process's user and system CPU seconds so far (Linux /proc; 0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Server:
    port: int
    pid: int  # the daphne's own process (it runs in `--serve`'s)
    trace: Path


async def _measure(server: Server, cookie: str, database_url: str, watched: int, seconds: float) -> list:
    clients = [Client(page, watched if page == "run" else None) for page, n in PAGES.items() for _ in range(n)]
    readies = [asyncio.Event() for _ in clients]
    listeners = [asyncio.create_task(_listen(server.port, cookie, c, r)) for c, r in zip(clients, readies, strict=True)]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 30)
        phases = []
        for number, (mode, rate) in enumerate(PHASES[1:] if is_tiny() else PHASES):  # tiny: the 500/s phases only
            cpu, started = _cpu_seconds(server.pid), time.monotonic()
            events, stored, total = await _publish(database_url, mode, rate, seconds, f"p{number}")
            server_cores = (_cpu_seconds(server.pid) - cpu) / (time.monotonic() - started)
            await _wait_delivered(clients, events)
            for listener in listeners:
                if listener.done():
                    listener.result()  # a client that failed fails the benchmark, loudly
            counts_ok = all(c.total == total for c in clients if c.page == "overview") if mode == "recorded" else None
            latencies, pairs, stages, by_page = _figures(events, clients, _read_trace(server.trace))
            load = os.getloadavg()[0]
            figures = (latencies, pairs, counts_ok, stages, by_page)
            phases.append(Phase(mode, rate, stored, *figures, load, seconds, server_cores))
        return phases
    finally:
        for listener in listeners:
            listener.cancel()
        await asyncio.gather(*listeners, return_exceptions=True)


async def _wait_delivered(clients: list[Client], events: list[dict]) -> None:
    deadline = time.monotonic() + DELIVERY_SECONDS
    last = events[-1] if events else None
    while last is not None and time.monotonic() < deadline:
        waiting = [c for c in clients if any(c.concerned(e) and _key(e) not in c.seen for e in events[-50:])]
        if not waiting:
            return
        await asyncio.sleep(0.1)


def _key(event: dict) -> tuple[int, int]:
    return event["run"], event["seq"]


def _figures(events: list[dict], clients: list[Client], trace: dict) -> tuple[list[float], int, dict, dict]:
    latencies: list[float] = []
    pairs = 0
    stages: dict[str, list[float]] = {name: [] for name, _, _ in STAGES} | {RENDER_CPU: []}
    by_page: dict[str, tuple[list[float], list[float]]] = {page: ([], []) for page in PAGES}
    for event in events:
        for client in clients:
            if not client.concerned(event):
                continue
            pairs += 1
            seen = client.seen.get(_key(event))
            if seen is None or seen - event["stamp"] > DELIVERY_SECONDS:
                continue
            latencies.append(max(0.0, seen - event["stamp"]))
            by_page[client.page][0].append(latencies[-1])
            times = {"stamp": event["stamp"], "seen": seen, **trace.get((_key(event), client.page), {})}
            for name, start, end in STAGES:
                if start in times and end in times:
                    stages[name].append(max(0.0, times[end] - times[start]))
            if "cpu" in times:
                stages[RENDER_CPU].append(times["cpu"])
                by_page[client.page][1].append(times["cpu"])
    return latencies, pairs, stages, by_page


def _read_trace(path: Path) -> dict:
    """(event key, page) → the hub's times for the first render that covered it (from `--serve`)."""
    received: dict[tuple[int, int], float] = {}
    renders: dict = {}
    if not path.exists():
        return renders
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if "recv" in record:
            for run, seq in record["events"]:
                received.setdefault((run, seq), record["recv"])
            continue
        for run, seq in record["seqs"]:
            times = {k: record[k] for k in ("call", "start", "end", "sent", "cpu") if k in record}
            renders.setdefault(((run, seq), record["page"]), {"recv": received.get((run, seq)), **times})
    return {key: {k: v for k, v in times.items() if v is not None} for key, times in renders.items()}


# --- the publisher process -------------------------------------------------------------


async def _publish(database_url: str, mode: str, rate: int, seconds: float, tag: str) -> tuple[list[dict], float, int]:
    """Run the publisher process; the events it published (each stamped), its stored rate, the handoffs stored."""
    root = str(Path(__file__).resolve().parent.parent)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.live",
        "--publish",
        mode,
        str(rate),
        str(seconds),
        tag,
        cwd=root,
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": root},
        stdout=asyncio.subprocess.PIPE,
    )
    events: list[dict] = []
    stored, total = 0.0, 0
    async for line in process.stdout:
        record = json.loads(line)
        if "stored" in record:
            stored, total = record["stored"], record["handoffs"]
        else:
            events += [{**event, "stamp": record["at"]} for event in record["events"]]
    await process.wait()
    return events, stored, total


def publish(mode: str, rate: int, seconds: float, tag: str) -> None:
    """The publisher process: `rate` a second for `seconds`; a line per commit (or send) with its events."""
    from bench.environment import setup_django

    setup_django()
    from receipts.ingest import broadcast

    sent_events: list[dict] = []
    publish_many = broadcast.publish_many

    def stamped(events, *, wait=True):
        # Called once per batch, after its commit: the commit's time and its events.
        print(json.dumps({"at": time.monotonic(), "events": [_minimal(e) for e in events]}), flush=True)
        sent_events.extend(events)
        return publish_many(events, wait=wait)

    broadcast.publish_many = stamped
    started = time.monotonic()
    sent = (_record if mode == "recorded" else _synthesize)(rate, seconds, tag, started)
    elapsed = time.monotonic() - started
    from receipts.models import Handoff

    print(json.dumps({"stored": sent / elapsed, "handoffs": Handoff.objects.count()}), flush=True)
    broadcast._publisher().wait_sent(5.0)


def _record(rate: int, seconds: float, tag: str, started: float) -> int:
    from agents.observe.writer import LocalSink

    sink = LocalSink()
    sent = 0
    while (now := time.monotonic()) - started < seconds:
        # What is due by now, in one transaction (at most MAX_BATCH), as a batched writer flushes its buffer.
        due = min(int((now - started) * rate) + 1 - sent, MAX_BATCH)
        if due <= 0:
            time.sleep((sent + 1) / rate - (now - started))
            continue
        sink.write([_receipt(n, tag) for n in range(sent + 1, sent + due + 1)])
        sent += due
    return sent


def _synthesize(rate: int, seconds: float, tag: str, started: float) -> int:
    from receipts.ingest import broadcast
    from receipts.models import Run

    runs = list(Run.objects.order_by("-pk").values_list("pk", "seq")[:40])
    watched = Run.objects.get(operation_id=_watched_operation("warm"))
    seqs = {pk: seq + 1000 for pk, seq in [*runs, (watched.pk, watched.seq)]}  # beyond what the pages saw
    watched = watched.pk
    sent = 0
    while (now := time.monotonic()) - started < seconds:
        due = int((now - started) * rate) + 1 - sent
        if due <= 0:
            time.sleep(min(SYNTHETIC_TICK, (sent + 1) / rate - (now - started)))
            continue
        events = []
        for n in range(sent + 1, sent + due + 1):
            run = watched if n % WATCHED_EVERY == 0 else runs[n % len(runs)][0]
            seqs[run] += 1
            events.append(_synthetic_event(run, seqs[run], n, tag))
        broadcast.publish_many(events, wait=False)
        sent += due
        time.sleep(SYNTHETIC_TICK)
    return sent


def _minimal(event: dict) -> dict:
    return {"type": event["type"], "run": event["run"], "seq": event["seq"]}


def _synthetic_event(run: int, seq: int, n: int, tag: str) -> dict:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "type": "handoff.changed",
        "run": run,
        "operation_id": f"bench-{tag}",
        "seq": seq,
        "handoff": n,
        "handoff_id": f"bench-{tag}-{n}",
        "part": "created",
        "verdict": "IN_PROGRESS",
        "boundary": None,
        "final_status": None,
        "wait_open": False,
        "dry_run": False,
        "at": at,
    }


def _watched_operation(tag: str) -> str:
    return f"bench-live-{tag}-watched"


def _receipt(n: int, tag: str):
    from receipts.ingest import intake

    operation = _watched_operation("warm") if n % WATCHED_EVERY == 0 else f"bench-live-{tag}-op-{n // PER_RUN}"
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    created = {
        "sender": "triage",
        "receiver": "sales",
        "route_version": "routes/1",
        "tool_call_id": "call_1",
        "required_context_keys": [],
        "at": at,
    }
    return intake.PartEntry(operation, f"bench-live-{tag}-{n}", "created", created)


# --- the traced server (`--serve`) -----------------------------------------------------

_render_times: contextvars.ContextVar[dict | None] = contextvars.ContextVar("render_times", default=None)


def serve(port: int, trace: Path) -> None:
    """daphne with the hub's steps timed into `trace` (one JSON line per message received and per render)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sidewisp.settings")
    from daphne.cli import CommandLineInterface

    import sidewisp.asgi  # noqa: F401 - sets Django up before the hub is imported
    from sidewisp.live import hub as live

    out = trace.open("a", buffering=1)
    _trace_hub(live, out)
    CommandLineInterface().run(["-b", "127.0.0.1", "-p", str(port), "sidewisp.asgi:application"])


def _trace_hub(live, out) -> None:
    dispatch, render, on_render_thread = live.Hub.dispatch, live.Hub._render, live.on_render_thread

    def traced_dispatch(self, message):
        events = message.get("events") or ([message["event"]] if message.get("event") else [])
        keys = [[e.get("run"), e.get("seq")] for e in events if isinstance(e, dict)]
        out.write(json.dumps({"recv": time.monotonic(), "events": keys}) + "\n")
        return dispatch(self, message)

    async def traced_render(self, topic, *args, **kwargs):
        # What the render named: this hub's render says it (`Topic.named`), an older one's took what was pending.
        asked = [[run, seq] for run, seqs in topic.pending.items() for seq in seqs]
        times = {"call": time.monotonic()}
        token = _render_times.set(times)
        topic.named = {}
        try:
            return await render(self, topic, *args, **kwargs)
        finally:
            _render_times.reset(token)
            times["sent"] = time.monotonic()
            named = [[run, seq] for run, seqs in topic.named.items() for seq in seqs]
            covered = named if hasattr(topic, "take_pending") else asked
            out.write(json.dumps({"page": topic.scope.page, "seqs": covered, **times}) + "\n")

    async def traced_on_render_thread(function, *args):
        times = _render_times.get()
        if times is None or "start" in times:
            return await on_render_thread(function, *args)

        def timed(*inner):
            times["start"], cpu = time.monotonic(), time.thread_time()
            try:
                return function(*inner)
            finally:
                times["end"], times["cpu"] = time.monotonic(), time.thread_time() - cpu

        return await on_render_thread(timed, *args)

    live.Hub.dispatch, live.Hub._render, live.on_render_thread = traced_dispatch, traced_render, traced_on_render_thread


# --- figures ---------------------------------------------------------------------------


def _p(values: list[float], q: int) -> str:
    if len(values) < 2:
        return f"{values[0] * 1000:.0f}" if values else "-"
    return f"{statistics.quantiles(values, n=100)[q - 1] * 1000:.0f}"


def _pcts(values: list[float]) -> str:
    if len(values) < 2:
        return "no change seen"
    q = statistics.quantiles(values, n=100)
    return f"p50 {q[49] * 1000:.0f} ms / p95 {q[94] * 1000:.0f} ms / max {max(values) * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--app-dir", help="serve the app from this checkout instead")
    parser.add_argument("--publish", nargs=4, metavar=("MODE", "RATE", "SECONDS", "TAG"), help=argparse.SUPPRESS)
    parser.add_argument("--serve", nargs=2, metavar=("PORT", "TRACE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        mode, rate, seconds, tag = args.publish
        publish(mode, int(rate), float(seconds), tag)
        return
    if args.serve:
        serve(int(args.serve[0]), Path(args.serve[1]))
        return
    from bench.environment import setup_django
    from bench.table import markdown

    setup_django()
    print(markdown(rows(args.quick, args.app_dir)))


if __name__ == "__main__":
    main()
