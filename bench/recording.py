"""How long the evidence path takes: classify() alone, and record() end to end.

Prints figures, never pass/fail. Uses the database at DATABASE_URL (SQLite by
default; PostgreSQL when set) in a throwaway test database, and the Redis at
REDIS_URL for the events:

    SECRET_KEY=x .venv/bin/python bench/recording.py [--handoffs 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sidewisp.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

from agents.contracts import install_team_contracts, team_contracts  # noqa: E402
from receipts import bundle, verdicts  # noqa: E402
from receipts.recording import record  # noqa: E402
from tests.factories import healthy_bundle, healthy_parts  # noqa: E402


def _summary(label: str, samples_us: list[float]) -> None:
    samples_us.sort()
    p99 = samples_us[int(len(samples_us) * 0.99) - 1]
    print(f"{label:<44} n={len(samples_us):>6}  p50 {statistics.median(samples_us):8.1f} µs  p99 {p99:8.1f} µs")


def bench_classify(n: int) -> None:
    rules = bundle.parse_contracts(team_contracts())
    parsed = bundle.parse_bundle(healthy_bundle())
    now = datetime(2026, 7, 30, 12, tzinfo=UTC)
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        verdicts.classify(parsed, rules, now)
        samples.append((time.perf_counter_ns() - start) / 1000)
    _summary("classify (pure)", samples)
    samples = []
    raw = healthy_bundle()
    for _ in range(n):
        start = time.perf_counter_ns()
        bundle.parse_bundle(raw)
        samples.append((time.perf_counter_ns() - start) / 1000)
    _summary("parse_bundle (minimize + validate)", samples)


def bench_record(handoffs: int) -> None:
    install_team_contracts()
    samples = []
    for i in range(handoffs):
        for part, value in healthy_parts().items():
            start = time.perf_counter_ns()
            record(handoff_id=f"bench-{i}", operation_id=f"op-bench-{i}", part=part, value=value)
            samples.append((time.perf_counter_ns() - start) / 1000)
    _summary(f"record() one part ({connection.vendor}, with event)", samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--handoffs", type=int, default=200)
    args = parser.parse_args()
    bench_classify(20_000)
    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0)
    try:
        bench_record(args.handoffs)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
