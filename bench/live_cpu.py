"""Live pages' render CPU per change, on bench.live's data: the hub's own render and cut, timed on this thread.

`bench.live` measures latency through a real daphne, which other processes on the machine make noisy; this
measures what one change costs the server's CPU, page by page. It stores what `bench.live` stores (its
warm-up, then 600 receipts as at 50/s and 6,000 as at 500/s), then per round records a batch of 50 receipts
(one of them the watched run's) and renders each page as the hub does (`_render_and_cut` against the page's
previous render, as the bench's viewer), timing the render thread's CPU. Prints the median and p90 per page.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python -m bench.live_cpu [--rounds N]
        [--time module:function ...] [--profile PAGE]

`--time` also prints the CPU and wall time per call of the named functions (looked up where the render
calls them, e.g. `receipts.queries.dashboard:window_stats`); `--profile` prints cProfile's view of one page.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import pstats
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from bench import live

SEEDED = (("p0", 600), ("p1", 6_000))  # what bench.live's two recorded phases store
BATCH = 50  # receipts per round: one of them the watched run's (bench.live.WATCHED_EVERY)
WARM_ROUNDS = 2  # not counted: the reused rows and cards are cold


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--time", nargs="*", default=[], metavar="MODULE:FUNCTION")
    parser.add_argument("--profile", choices=sorted(live.PAGES))
    args = parser.parse_args()
    from bench.environment import setup_django, throwaway_database

    setup_django()
    timed = {name: _timed(*name.split(":")) for name in args.time}
    with throwaway_database():
        cpu, queries, profile = _measure(args.rounds, args.profile)
    for page, values in cpu.items():
        p90 = sorted(values)[int(0.9 * (len(values) - 1))]
        median = statistics.median(values)
        print(f"{page:9s} render CPU ms: median {median:6.1f}, p90 {p90:6.1f}; queries {queries[page]}")
    print(f"all four pages: {sum(statistics.median(v) for v in cpu.values()):.1f} ms of CPU per round")
    for name, (calls, seconds, wall) in timed.items():
        if calls:
            print(f"  {name}: {calls} calls, CPU {seconds * 1000 / calls:.2f} ms, wall {wall * 1000 / calls:.2f} ms")
    if profile is not None:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)


def _measure(rounds: int, profiled: str | None) -> tuple[dict, dict, cProfile.Profile | None]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.observe.writer import LocalSink
    from sidewisp.live import hub

    watched = live._warm_up()
    sink = LocalSink()
    for tag, count in SEEDED:
        for start in range(1, count + 1, live.MAX_BATCH):
            sink.write([live._receipt(n, tag) for n in range(start, min(start + live.MAX_BATCH, count + 1))])
    user = _viewer()
    topics = {page: hub.Topic(scope, _audience(scope, user)) for page, scope in _scopes(watched).items()}
    shown: dict = dict.fromkeys(topics)
    cpu: dict[str, list[float]] = {page: [] for page in topics}
    queries: dict[str, int] = {}
    profile = cProfile.Profile() if profiled else None
    for n in range(rounds + WARM_ROUNDS):
        sink.write([live._receipt(BATCH * n + k, "cpu") for k in range(1, BATCH + 1)])
        for page, topic in topics.items():
            topic.pending[watched].add(n)
            counted = n >= WARM_ROUNDS
            with CaptureQueriesContext(connection) as captured:
                if counted and page == profiled:
                    profile.enable()
                started = time.thread_time()
                _, shown[page], _, _ = hub._render_and_cut(topic, [user.pk], shown[page], shown[page] is None)
                spent = time.thread_time() - started
                if counted and page == profiled:
                    profile.disable()
            if counted:
                cpu[page].append(spent * 1000)
                queries[page] = len(captured)
    return cpu, queries, profile


def _viewer():
    from django.contrib.auth import get_user_model

    live._session_cookie()  # bench.live's viewer, with its one permission
    return get_user_model().objects.get(username="bench-viewer")


def _scopes(watched: int) -> dict:
    from sidewisp import pages

    return {page: pages.PageScope(page, run_id=watched if page == "run" else None) for page in live.PAGES}


def _audience(scope, user) -> tuple:
    from sidewisp import pages

    return pages.audience(scope, user)


def _timed(module: str, name: str) -> list:
    """Wrap `module.name` to add up its calls, CPU and wall seconds (in the returned list)."""
    owner = importlib.import_module(module)
    original = getattr(owner, name)
    totals = [0, 0.0, 0.0]

    def wrapper(*args, **kwargs):
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[0] += 1
            totals[1] += time.thread_time() - cpu
            totals[2] += time.perf_counter() - wall

    setattr(owner, name, wrapper)
    return totals


if __name__ == "__main__":
    main()
