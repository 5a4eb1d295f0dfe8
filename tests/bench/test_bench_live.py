"""`make bench`'s live section, small: ten real clients on mixed pages; stored rate, latency, delivery."""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings

from tests.bench.test_bench_smoke import table_rows


def test_the_quick_live_section_prints_stored_beside_offered_the_latency_the_delivery_and_where_the_time_goes():
    result = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--only", "live"],
        cwd=settings.BASE_DIR,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    live = [" | ".join(cells) for cells in table_rows(result.stdout, "live")]
    phases, stages = live[0::2], live[1::2]
    assert [row.split(" | ")[1] for row in phases] == [
        "live pages, commit → visible in 10 clients (overview, runs, waits, a run), 50 receipts/s",
        "live pages, commit → visible in 10 clients (overview, runs, waits, a run), 500 receipts/s",
        "live pages, commit → visible in 10 clients (overview, runs, waits, a run), 500 synthetic events "
        "(push path alone)/s",
    ]
    assert all("stored" in row and "receipts/s" in row for row in phases[:2]) and "sent " in phases[2]
    assert all("p95" in row and "delivered" in row and "load average" in row for row in phases)
    assert all("overview counts = stored" in row for row in phases[:2])  # every change reached the overview
    assert all("published → hub" in row and "render" in row and "sent → client" in row for row in stages)
