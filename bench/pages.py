"""Every operator page's server time and query count on a large data set, plus the EXPLAIN of its slowest query.

Each page is requested about 30 times by a logged-in operator through Django's test client (the whole
request: middleware, queries, template); p50/p95 are of those times. The data set is `bench.loader`'s
(100k handoffs / 1M receipts; 5k handoffs in quick mode), loaded into DATABASE_URL when it holds a
different size. Figures are printed, never judged.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/h_scale_bench python -m bench.pages [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass

from bench.sizes import pick

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sidewisp.settings")

FULL_HANDOFFS = 100_000
QUICK_HANDOFFS = 5_000
TINY_HANDOFFS = 200  # `--tiny` (the smoke test): the loader and every page run, the figures mean nothing
REQUESTS = 30
GOAL = "≤ 100 ms p95 at 100k handoffs, constant queries"


@dataclass(frozen=True)
class Measured:
    name: str
    url: str
    p50: float  # ms
    p95: float
    queries: int
    slowest_sql: str
    slowest_ms: float


def _prepare(quick: bool):
    import django

    django.setup()
    from django.test import Client

    from bench import loader
    from receipts.models import Handoff, Run

    wanted = pick(quick, tiny=TINY_HANDOFFS, quick=QUICK_HANDOFFS, full=FULL_HANDOFFS)
    if Handoff.objects.count() != wanted or Run.objects.exclude(operation_id__startswith=loader.PREFIX).exists():
        loaded = loader.load(wanted)
        print(
            f"loaded {loaded.handoffs} handoffs, {loaded.receipts} receipts in {loaded.seconds:.0f} s", file=sys.stderr
        )
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user, _ = get_user_model().objects.get_or_create(username="bench-oncall")
    user.groups.set([Group.objects.get(name="operator")])  # made by the roles migration
    # No setup_test_environment(): its instrumented template rendering would be timed too.
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    return client


def _urls() -> list[tuple[str, str]]:
    from receipts.models import Run

    runs = Run.objects.order_by("-created_at", "-pk")
    deep = runs.values_list("pk", flat=True)[len(runs) // 2 : len(runs) // 2 + 1].get()
    middle = runs.filter(pk=deep).values_list("operation_id", flat=True).get()
    busy = Run.objects.filter(handoffs__isnull=False).order_by("-pk").values_list("pk", flat=True).first()
    return [
        *((f"overview ({w})", f"/?window={w}") for w in ("15m", "1h", "24h", "7d")),
        ("runs list", "/runs/"),
        ("runs?agent=", "/runs/?agent=billing"),
        ("runs, deep page (middle of the list)", f"/runs/?older={deep}"),
        ("runs?verdict=HEALTHY&window=7d", "/runs/?verdict=HEALTHY&window=7d"),
        ("runs?q= (part of an operation id)", f"/runs/?q={middle[-9:-2]}"),
        ("run detail", f"/runs/{busy}/"),
        ("waits", "/waits/"),
        ("false completions", "/false-completions/"),
        ("audit", "/audit/"),
        ("audit.csv (10k rows)", "/audit.csv"),
    ]


def _measure(client, name: str, url: str, requests: int) -> Measured:
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    times = []
    reset_queries()  # each request resets the log (request_started): start from an empty one
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
        _drain(response)
    # Copied now: the log is a window on connection.queries, which the next request clears.
    queries = list(captured.captured_queries)
    if response.status_code != 200:
        msg = f"{url} answered {response.status_code}"
        raise RuntimeError(msg)
    for _ in range(requests):
        start = time.perf_counter()
        _drain(client.get(url))
        times.append((time.perf_counter() - start) * 1000)
    slowest = max(queries, key=lambda q: float(q["time"]))
    times.sort()
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    return Measured(
        name, url, statistics.median(times), p95, len(queries), slowest["sql"], float(slowest["time"]) * 1000
    )


def _drain(response) -> None:
    if response.streaming:
        b"".join(response.streaming_content)


def measure(quick: bool) -> list[Measured]:
    client = _prepare(quick)
    return [_measure(client, name, url, pick(quick, tiny=2, quick=REQUESTS, full=REQUESTS)) for name, url in _urls()]


def _explain(sql: str) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        prefix = "EXPLAIN (ANALYZE, BUFFERS) " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
        cursor.execute(prefix + sql)
        return "\n".join(str(row[0]) if len(row) == 1 else " ".join(map(str, row)) for row in cursor.fetchall())


_measured: dict[bool, list[Measured]] = {}


def _cached(quick: bool) -> list[Measured]:
    if quick not in _measured:
        _measured[quick] = measure(quick)
    return _measured[quick]


def rows(quick: bool):
    """One Row per page: p50/p95 server time and query count (bench.table)."""
    from bench.table import Row

    size = f"{pick(quick, tiny=TINY_HANDOFFS, quick=QUICK_HANDOFFS, full=FULL_HANDOFFS):,}"
    return [
        Row(
            "pages",
            f"{m.name} at {size} handoffs",
            f"p50 {m.p50:.1f} ms / p95 {m.p95:.1f} ms, {m.queries} queries",
            GOAL,
            f"`{m.url}`; slowest query {m.slowest_ms:.1f} ms",
        )
        for m in _cached(quick)
    ]


def explain(quick: bool) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of each page's slowest query, as a markdown block per page."""
    blocks = []
    for m in _cached(quick):
        plan = _explain(m.slowest_sql)
        blocks.append(f"#### {m.name} — `{m.url}` ({m.slowest_ms:.1f} ms)\n\n```\n{m.slowest_sql}\n\n{plan}\n```")
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
    from bench.table import markdown

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_HANDOFFS} handoffs instead of {FULL_HANDOFFS}")
    parser.add_argument("--no-explain", action="store_true")
    args = parser.parse_args(argv)
    print(markdown(rows(args.quick)))
    if not args.no_explain:
        print()
        print(explain(args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
