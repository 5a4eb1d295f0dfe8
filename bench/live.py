"""Live pages under load: receipt commit → change visible in 10 connected pages, at 50 / 200 / 500 events/s.

A daphne serving the app (against DATABASE_URL's PostgreSQL and the Redis
channel layer) has ten real WebSocket clients on the overview, each with a
logged-in session cookie. A publisher process records receipts through the
real recording path (the evidence writer's `LocalSink`: one transaction per
batch holding every receipt due by then, its events published once after the
commit; one new handoff per receipt, ten to a run) at each
rate in turn and stamps each commit. A change is visible in a client when the
overview's verdict counts it shows add up to at least the handoffs committed
with it; p50/p95/p99 are over every (receipt, client) pair, and "delivered" is
the share seen within 12 s. Figures are printed, never judged.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/h_live python -m bench.live [--quick] [--app-dir DIR]

`--app-dir` serves another checkout of the app (e.g. `git archive` of an
earlier commit) to compare consumers; the publisher and clients stay these.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

if __package__ in (None, ""):  # run as a script: the repository root is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sizes import is_tiny, pick
from bench.table import Row

RATES = (50, 200, 500)
CLIENTS = 10
DELIVERY_SECONDS = 12.0
MAX_BATCH = 500  # receipts per transaction at most
GOAL = "p95 ≤ 300 ms at 500 events/s with 10 pages, every change delivered"
PAGE = "/ws/health/?page=overview"
COUNTS = re.compile(r'data-count="([A-Z_]+)">(\d+)<')


@dataclass(frozen=True)
class Phase:
    rate: int
    achieved: float  # receipts committed per second
    latencies: list[float]  # seconds, per (receipt, client) pair delivered within DELIVERY_SECONDS
    pairs: int  # (receipt, client) pairs in all

    def row(self, note: str) -> Row:
        delivered = 100 * len(self.latencies) / self.pairs if self.pairs else 0.0
        figure = f"{_pcts(self.latencies)}; delivered within 12 s {delivered:.1f} %"
        what = f"live page, commit → visible in {CLIENTS} clients at {self.rate} events/s"
        return Row("live", what, figure, GOAL, f"{note}; achieved {self.achieved:.0f} receipts/s")


def rows(quick: bool, app_dir: str | None = None) -> list[Row]:
    from django.db import connection

    from bench.environment import throwaway_database

    seconds = pick(quick, tiny=1.0, quick=4.0, full=15.0)
    with throwaway_database() as name:
        database_url = _database_url(connection, name)
        cookie = _session_cookie()
        with _daphne(database_url, app_dir) as port:
            phases = asyncio.run(_measure(port, cookie, database_url, seconds))
    where = f"daphne from {app_dir}" if app_dir else "daphne, this checkout"
    note = f"{where}, {connection.vendor}, overview page, {seconds:.0f} s per rate"
    return [phase.row(note) for phase in phases]


# --- the server and the session --------------------------------------------------------


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


@contextmanager
def _daphne(database_url: str, app_dir: str | None) -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cwd = Path(app_dir).resolve() if app_dir else Path(__file__).resolve().parent.parent
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(cwd)}
    args = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "sidewisp.asgi:application"]
    server = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_port(port, server)
        yield port
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


# --- clients and publisher -------------------------------------------------------------


class Client:
    """One page: when it saw which total of handoffs (monotonic seconds, count)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.counts: list[int] = []

    def note(self, message: str) -> None:
        start = message.find('id="verdict-counts"')
        if start < 0:
            return
        section = message[start : message.find("</section>", start)]
        total = sum(int(n) for _, n in COUNTS.findall(section))
        if not self.counts or total > self.counts[-1]:
            self.times.append(time.monotonic())
            self.counts.append(total)

    def seen_at(self, count: int) -> float | None:
        i = bisect.bisect_left(self.counts, count)
        return self.times[i] if i < len(self.counts) else None


async def _listen(port: int, cookie: str, client: Client, ready: asyncio.Event) -> None:
    import websockets

    url = f"ws://127.0.0.1:{port}{PAGE}"
    async with websockets.connect(
        url, origin=f"http://127.0.0.1:{port}", additional_headers={"Cookie": cookie}, max_size=None
    ) as ws:
        client.note(await ws.recv())  # the snapshot
        ready.set()
        async for message in ws:
            client.note(message if isinstance(message, str) else message.decode())


async def _measure(port: int, cookie: str, database_url: str, seconds: float) -> list[Phase]:
    clients = [Client() for _ in range(CLIENTS)]
    readies = [asyncio.Event() for _ in clients]
    listeners = [asyncio.create_task(_listen(port, cookie, c, r)) for c, r in zip(clients, readies, strict=True)]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 30)
        phases = []
        for rate in RATES[-1:] if is_tiny() else RATES:  # tiny: the top rate only
            commits, achieved = await _publish(database_url, rate, seconds)
            last = commits[-1][0] if commits else 0
            deadline = time.monotonic() + DELIVERY_SECONDS
            while time.monotonic() < deadline and any((c.counts or [0])[-1] < last for c in clients):
                await asyncio.sleep(0.1)
            for listener in listeners:
                if listener.done():
                    listener.result()  # a client that failed fails the benchmark, loudly
            phases.append(_phase(rate, achieved, commits, clients))
        return phases
    finally:
        for listener in listeners:
            listener.cancel()
        await asyncio.gather(*listeners, return_exceptions=True)


def _phase(rate: int, achieved: float, commits: list[tuple[int, float]], clients: list[Client]) -> Phase:
    # Every receipt counts once per client: a commit of n receipts is n changes seen at the same moment.
    latencies = []
    previous = commits[0][0] - 1 if commits else 0
    for count, committed in commits:
        receipts, previous = count - previous, count
        for client in clients:
            seen = client.seen_at(count)
            if seen is not None and seen - committed <= DELIVERY_SECONDS:
                latencies += [max(0.0, seen - committed)] * receipts
    pairs = (commits[-1][0] - commits[0][0] + 1) * len(clients) if commits else 0
    return Phase(rate, achieved, latencies, pairs)


async def _publish(database_url: str, rate: int, seconds: float) -> tuple[list[tuple[int, float]], float]:
    """Run the publisher process; its (total handoffs after the commit, commit time) lines."""
    env = {**os.environ, "DATABASE_URL": database_url}
    root = str(Path(__file__).resolve().parent.parent)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.live",
        "--publish",
        str(rate),
        str(seconds),
        cwd=root,
        env={**env, "PYTHONPATH": root},
        stdout=asyncio.subprocess.PIPE,
    )
    commits: list[tuple[int, float]] = []
    achieved = 0.0
    async for line in process.stdout:
        record = json.loads(line)
        if "achieved" in record:
            achieved = record["achieved"]
        else:
            commits.append((record["count"], record["at"]))
    await process.wait()
    return commits, achieved


def publish(rate: int, seconds: float) -> None:
    """The publisher process: `rate` receipts a second for `seconds`, a line per commit on stdout."""
    from bench.environment import setup_django

    setup_django()
    from agents.writer import LocalSink
    from receipts import intake
    from receipts.models import Handoff

    sink = LocalSink()
    total = Handoff.objects.count()
    started = time.monotonic()
    sent = 0
    while (now := time.monotonic()) - started < seconds:
        # What is due by now, in one transaction (at most MAX_BATCH), as a batched writer flushes its buffer.
        due = min(int((now - started) * rate) + 1 - sent, MAX_BATCH)
        if due <= 0:
            time.sleep((sent + 1) / rate - (now - started))
            continue
        batch = []
        for _ in range(due):
            sent += 1
            name = f"bench-live-{os.getpid()}-{sent}"
            batch.append(intake.PartEntry(f"bench-live-{os.getpid()}-op-{sent // 10}", name, "created", _created()))
        sink.write(batch)
        committed = time.monotonic()  # the commit, and its events queued for publishing (not yet sent)
        total += due
        print(json.dumps({"count": total, "at": committed}), flush=True)
    print(json.dumps({"achieved": sent / (time.monotonic() - started)}), flush=True)
    # The last batch's events are queued, not yet sent: give this process's publisher loop a moment.
    time.sleep(1.0)


def _created() -> dict:
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return {
        "sender": "triage",
        "receiver": "sales",
        "route_version": "routes/1",
        "tool_call_id": "call_1",
        "required_context_keys": [],
        "at": at,
    }


def _pcts(values: list[float]) -> str:
    if len(values) < 2:
        return "no change seen"
    q = statistics.quantiles(values, n=100)
    return f"p50 {q[49] * 1000:.0f} ms / p95 {q[94] * 1000:.0f} ms / p99 {q[98] * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--app-dir", help="serve the app from this checkout instead")
    parser.add_argument("--publish", nargs=2, metavar=("RATE", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        publish(int(args.publish[0]), float(args.publish[1]))
        return
    from bench.environment import setup_django
    from bench.table import markdown

    setup_django()
    print(markdown(rows(args.quick, args.app_dir)))


if __name__ == "__main__":
    main()
