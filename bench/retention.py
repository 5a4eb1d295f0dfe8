"""Pruning a million receipts while the pages are read: how long it takes, and the pages' p95 with and without it.

The data set is `bench.loader`'s (100k handoffs / 1M receipts; 5k / 50k in quick mode), with the receipts'
months partitioned ahead on PostgreSQL. The retention policy keeps receipts 1 day and runs a year, and the
pruning runs as if 40 days had passed: every ended run loses its receipts and verdict history (about 93% of
the runs; the loader's running, queued, parked and waiting runs keep theirs). Each of the loader's months
still holds runs that have not ended, so no month's partition is dropped whole: this is the batched path,
the one that could slow a page.

The pages benchmark's page set (`bench.pages._urls`, but for the silent beat's `/healthz`) is requested
round-robin by a logged-in operator, first
with nothing else running (BASELINE_ROUNDS rounds, on the data as loaded), then until a separate process
has pruned (its own connection, `SIDEWISP_RETENTION_BATCH_ROWS` rows per statement, the default pause and
duty cycle between statements; its start-up is not timed). p95 is over all page requests of each phase; the
ratio is during / without.
Figures are printed, never judged.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/h_scale_bench python -m bench.retention [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta

from bench.sizes import pick

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sidewisp.settings")

AS_IF_DAYS_LATER = 40
BASELINE_ROUNDS = 10


def _partition_ahead() -> None:
    """Give every month the loader writes into a partition of its own (otherwise they land in the default)."""
    from bench import loader
    from receipts.retention import partitions

    if not partitions.enabled():
        return
    month = date.today().replace(day=1)
    oldest = (datetime.now(UTC) - loader.SPAN).date().replace(day=1)
    have = set(partitions.months())
    while month >= oldest:
        if month not in have:
            partitions.create(month)
        month = (month - timedelta(days=1)).replace(day=1)


def _load(quick: bool):
    from bench import pages

    _partition_ahead()
    return pages._prepare(pick(quick, tiny=pages.TINY_HANDOFFS, quick=pages.QUICK_HANDOFFS, full=pages.FULL_HANDOFFS))


def _p95(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def _round(client, urls: list[tuple[str, str]], times: list[float]) -> None:
    from bench.pages import _drain

    for _, url in urls:
        start = time.perf_counter()
        _drain(client.get(url))
        times.append((time.perf_counter() - start) * 1000)


def _start_pruner() -> subprocess.Popen:
    from django.db import connection

    command = [sys.executable, "-m", "bench.retention", "--prune-in", connection.settings_dict["NAME"]]
    pruner = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    # Its start (Python, Django) is not pruning: the pages are timed from the moment it begins.
    if pruner.stdout.readline().strip() != "ready":
        msg = "the pruning process did not start"
        raise RuntimeError(msg)
    return pruner


def prune_in(database: str) -> dict:
    """The pruning process: the policy above, as if AS_IF_DAYS_LATER days had passed; prints its figures."""
    from bench.environment import setup_django

    setup_django()
    from django.db import connection

    connection.settings_dict["NAME"] = database
    from receipts import retention
    from receipts.models import RetentionPolicy

    policy = RetentionPolicy(pk=1, receipts_days=1, reports_days=1, deliveries_days=1, runs_days=365)
    policy.audit_days = policy.audit_minimum_days = 365
    later = datetime.now(UTC) + timedelta(days=AS_IF_DAYS_LATER)
    connection.ensure_connection()
    print("ready", flush=True)
    sys.stdin.readline()
    last = retention.prune(now=later, policy=policy)
    return {"seconds": last.seconds, "removed": last.removed, "dropped": last.partitions_dropped, "error": last.error}


def _drop_a_month() -> dict | None:
    """End every run of the oldest loaded month that has not ended, then prune again: its partition is dropped."""
    from receipts import retention
    from receipts.models import Handoff, Receipt, RetentionPolicy, Run, handoff_month
    from receipts.retention import partitions

    if not partitions.enabled():
        return None
    month = handoff_month(Handoff.objects.order_by("created_at").values_list("created_at", flat=True).first())
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    end = datetime(*partitions.following(month).timetuple()[:3], tzinfo=UTC)
    in_month = Handoff.objects.filter(created_at__gte=start, created_at__lt=end)
    Handoff.objects.filter(run__handoffs__in=in_month).update(wait_open=False)
    Run.objects.filter(handoffs__in=in_month).exclude(status__in=("complete", "failed")).update(
        status="complete", finished_at=end
    )
    held = Receipt.objects.filter(handoff_month=month).count()
    policy = RetentionPolicy(pk=1, receipts_days=1, reports_days=1, deliveries_days=1, runs_days=365)
    policy.audit_days = policy.audit_minimum_days = 365
    later = datetime.now(UTC) + timedelta(days=AS_IF_DAYS_LATER)
    last = retention.prune(now=later, policy=policy, pause=0)
    return {"month": month.isoformat(), "held": held, "dropped": last.partitions_dropped, "seconds": last.seconds}


def measure(quick: bool) -> dict:
    from django.conf import settings

    from bench.pages import HEALTHZ_SILENT, _urls
    from receipts.models import Receipt

    client = _load(quick)
    # Not /healthz with beat silent: it waits its ping's whole timeout (no worker here), a second that would
    # be the p95 of both phases and hide what pruning does to the pages.
    urls = [(name, url) for name, url in _urls() if name != HEALTHZ_SILENT]
    _round(client, urls, [])  # warm: the first request of a page pays for its templates
    receipts_before = Receipt.objects.count()
    without: list[float] = []
    for _ in range(pick(quick, tiny=1, quick=BASELINE_ROUNDS, full=BASELINE_ROUNDS)):
        _round(client, urls, without)
    during: list[float] = []
    pruner = _start_pruner()
    pruner.stdin.write("go\n")
    pruner.stdin.flush()
    while pruner.poll() is None:
        _round(client, urls, during)
    figures = json.loads(pruner.stdout.read().strip().splitlines()[-1])
    receipts_after = Receipt.objects.count()
    return {
        **figures,
        "month": _drop_a_month(),
        "receipts_before": receipts_before,
        "receipts_after": receipts_after,
        "batch_rows": settings.SIDEWISP_RETENTION_BATCH_ROWS,
        "pages": len(urls),
        "during": during,
        "without": without,
    }


def rows(quick: bool):
    """Rows for `make bench` (bench.table)."""
    from bench.table import Row

    m = measure(quick)
    removed = m["removed"]["receipts"]
    p95_without, p95_during = _p95(m["without"]), _p95(m["during"])
    note = f"{m['pages']} pages round-robin; {len(m['during'])} requests during, {len(m['without'])} without"
    rows = [
        Row(
            "retention",
            f"prune {removed:,} of {m['receipts_before']:,} receipts (+{m['removed']['verdict_changes']:,} verdict "
            "history entries) in batches",
            f"{m['seconds']:.1f} s ({removed / max(m['seconds'], 1e-9):,.0f} receipts/s)",
            "bounded statements, no long lock",
            f"{m['batch_rows']} rows per statement; {m['dropped']} month partitions dropped whole"
            + (f"; stopped early: {m['error']}" if m["error"] else ""),
        ),
        Row("retention", "page p95 without pruning", f"{p95_without:.1f} ms", "", note),
        Row("retention", "page p95 while pruning", f"{p95_during:.1f} ms", "", note),
        Row(
            "retention",
            "page p95 while pruning / without",
            f"{p95_during / p95_without:.2f}x",
            "≈ 1x (no page slower while it runs)",
            "one run: both phases on the same data and client",
        ),
    ]
    if month := m["month"]:
        rows.append(
            Row(
                "retention",
                f"prune a month whose runs have all ended ({month['held']:,} receipts left in {month['month'][:7]})",
                f"{month['seconds']:.2f} s, {month['dropped']} partition dropped whole",
                "dropping a month is cheap",
                "the whole pruning run without pauses: the DROP TABLE and the batches of the other kinds",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--prune-in", metavar="DATABASE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.prune_in:
        print(json.dumps(prune_in(args.prune_in)))
        return 0
    from bench.environment import setup_django, throwaway_database
    from bench.table import markdown

    setup_django()
    with throwaway_database():
        print(markdown(rows(args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
