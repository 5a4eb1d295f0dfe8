"""Every operator page's server time and query count on a large data set, plus the EXPLAIN of its slowest query.

Each page is requested about 30 times by a logged-in operator through Django's test client (the whole
request: middleware, queries, template); p50/p95 are of those times, and each row carries the load average
at its end. The data set is `bench.loader`'s (100k handoffs / 1M receipts; 5k handoffs in quick mode),
loaded into DATABASE_URL when it holds a different size. Figures are printed, never judged.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/h_scale_bench python -m bench.pages [--quick]

Any size, from code (the smoke test's tiny run): `rows(True, handoffs=200, requests=2)` and
`explain(True, handoffs=200, requests=2)`; or `python -m bench.pages --handoffs 200 --requests 2`.
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
    load: float  # the 1-minute load average when the page's requests ended
    cpu: float  # ms of this process's CPU per request, median (the database server's is not in it)


def _prepare(wanted: int):
    import django

    django.setup()
    from django.test import Client

    from bench import loader
    from receipts.models import Handoff, Run

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
        ("overview (default window)", "/"),
        *((f"overview ({w})", f"/?window={w}") for w in ("15m", "1h", "24h", "7d")),
        ("runs list", "/runs/"),
        ("runs?agent=", "/runs/?agent=billing"),
        ("runs, deep page (middle of the list)", f"/runs/?older={deep}"),
        ("runs?verdict=HEALTHY&window=7d", "/runs/?verdict=HEALTHY&window=7d"),
        ("runs?q= (part of an operation id)", f"/runs/?q={middle[-9:-2]}"),
        ("run detail", f"/runs/{busy}/"),
        ("run history", f"/runs/{busy}/history/"),
        ("waits", "/waits/"),
        ("waits, mine", "/waits/?mine=1"),
        ("false completions", "/false-completions/"),
        ("team map", "/map/"),
        ("system", "/system/"),
        ("audit", "/audit/"),
        ("audit?outcome=denied", "/audit/?outcome=denied"),
        ("audit.csv (the newest 10k rows)", "/audit.csv"),
        (HEALTHZ_FRESH, "/healthz"),
        (HEALTHZ_SILENT, "/healthz"),
    ]


# /healthz reads beat's worker status; with beat silent too it pings the workers itself (sidewisp.ops.health).
HEALTHZ_FRESH = "/healthz, beat's worker status fresh"
HEALTHZ_SILENT = "/healthz, beat silent (it pings; no worker here: the ping's whole timeout)"


def _set_liveness(name: str) -> None:
    from django.core.cache import cache

    from receipts.tasks import beat_heartbeat_key
    from sidewisp.ops import health

    if name == HEALTHZ_FRESH:  # what beat's tasks leave while beat and a worker run
        cache.set(beat_heartbeat_key(), time.time(), 3600)
        cache.set(health._worker_key(), {"workers": ["bench@host"], "at": time.time(), "full_at": 0}, 3600)
    elif name == HEALTHZ_SILENT:
        cache.delete_many([beat_heartbeat_key(), health._worker_key()])


def _measure(client, name: str, url: str, requests: int) -> Measured:
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    _set_liveness(name)
    times = []
    _drain(client.get(url))  # warm: the process's first request fills caches (content types) once
    reset_queries()  # each request resets the log (request_started): start from an empty one
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
        _drain(response)
    # Copied now: the log is a window on connection.queries, which the next request clears.
    queries = list(captured.captured_queries)
    if response.status_code != 200 and not url.startswith("/healthz"):  # no worker here: /healthz may say 503
        msg = f"{url} answered {response.status_code}"
        raise RuntimeError(msg)
    cpu = []
    for _ in range(requests):
        start, started_cpu = time.perf_counter(), time.process_time()
        _drain(client.get(url))
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    slowest = max(queries, key=lambda q: float(q["time"]))
    times.sort()
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    return Measured(
        name,
        url,
        statistics.median(times),
        p95,
        len(queries),
        slowest["sql"],
        float(slowest["time"]) * 1000,
        os.getloadavg()[0],
        statistics.median(cpu),
    )


def _drain(response) -> None:
    if response.streaming:
        b"".join(response.streaming_content)


def measure(handoffs: int, requests: int = REQUESTS) -> list[Measured]:
    client = _prepare(handoffs)
    # A silent beat's /healthz waits the ping's whole timeout each time: a few requests tell it.
    return [
        _measure(client, name, url, min(requests, 5) if name == HEALTHZ_SILENT else requests) for name, url in _urls()
    ]


COPY_PREFIX, COPY_SUFFIX = "COPY (", ") TO STDOUT WITH (FORMAT csv)"


def _explain(sql: str) -> str:
    from django.db import connection

    if sql.startswith(COPY_PREFIX) and sql.endswith(COPY_SUFFIX):  # audit.csv: the SELECT the COPY writes out
        sql = sql.removeprefix(COPY_PREFIX).removesuffix(COPY_SUFFIX)

    with connection.cursor() as cursor:
        prefix = "EXPLAIN (ANALYZE, BUFFERS) " if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN "
        cursor.execute(prefix + sql)
        return "\n".join(str(row[0]) if len(row) == 1 else " ".join(map(str, row)) for row in cursor.fetchall())


_measured: dict[tuple[int, int], list[Measured]] = {}


def _cached(quick: bool, handoffs: int | None, requests: int | None) -> tuple[int, list[Measured]]:
    size = handoffs or pick(quick, tiny=TINY_HANDOFFS, quick=QUICK_HANDOFFS, full=FULL_HANDOFFS)
    key = (size, requests or pick(quick, tiny=2, quick=REQUESTS, full=REQUESTS))
    if key not in _measured:
        _measured[key] = measure(*key)
    return size, _measured[key]


def rows(quick: bool, *, handoffs: int | None = None, requests: int | None = None):
    """One Row per page: p50/p95 server time and query count (bench.table), at `handoffs` when given."""
    from bench.table import Row

    size, measured = _cached(quick, handoffs, requests)
    label = f"{size // 1000}k" if size >= 1000 else str(size)
    return [
        Row(
            "pages",
            f"{m.name} at {label} handoffs",
            f"p50 {m.p50:.1f} ms / p95 {m.p95:.1f} ms, {m.queries} queries, {m.cpu:.1f} ms CPU",
            GOAL,
            f"`{m.url}`; slowest query {m.slowest_ms:.1f} ms; load average {m.load:.2f}",
        )
        for m in measured
    ]


def explain(quick: bool, *, handoffs: int | None = None, requests: int | None = None) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of each page's slowest query, as a markdown block per page."""
    blocks = []
    for m in _cached(quick, handoffs, requests)[1]:
        plan = _explain(m.slowest_sql)
        blocks.append(f"#### {m.name} — `{m.url}` ({m.slowest_ms:.1f} ms)\n\n```\n{m.slowest_sql}\n\n{plan}\n```")
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
    from bench.table import markdown

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_HANDOFFS} handoffs instead of {FULL_HANDOFFS}")
    parser.add_argument("--handoffs", type=int, help="any size (overrides --quick)")
    parser.add_argument("--requests", type=int, default=REQUESTS, help="requests per page")
    parser.add_argument("--no-explain", action="store_true")
    args = parser.parse_args(argv)
    print(markdown(rows(args.quick, handoffs=args.handoffs, requests=args.requests)))
    if not args.no_explain:
        print()
        print(explain(args.quick, handoffs=args.handoffs, requests=args.requests))
    return 0


if __name__ == "__main__":
    sys.exit(main())
