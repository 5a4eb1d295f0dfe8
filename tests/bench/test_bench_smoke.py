"""`make bench`'s runner, small: one markdown table of the sections asked for, exit 0; one line when a service is down.

The runner runs in its own process, as `make bench` runs it, on the database server and Redis the tests use
(it makes and drops its own throwaway database). The app's virtualenv has no tracing peers, so their rows say
"not installed"; in .venv-bench they are measured.
"""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings

HEADER = "| section | what | figure | peer / goal | note |"


def run_bench(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.run", *args],
        cwd=settings.BASE_DIR,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def table_rows(stdout: str, section: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(f"| {section} |")]


def test_the_quick_overhead_section_prints_sidewisp_beside_the_peers_in_one_table_and_the_machine():
    result = run_bench("--quick", "--only", "overhead")

    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count(HEADER) == 1
    overhead = table_rows(result.stdout, "overhead")
    assert [row.split(" | ")[1] for row in overhead] == [
        "scripted two-agent handoff run, bare",
        "scripted two-agent handoff run with SidewispMiddleware + observe recording to the database",
        "scripted two-agent handoff run with Sidewisp, receipts handed to the evidence writer but not stored "
        "(its sink discards them)",
        "scripted two-agent handoff run with OpenInference LangChainInstrumentor",
        "scripted two-agent handoff run with Langfuse LangChain CallbackHandler",
    ]
    assert "median" in overhead[0] and "median" in overhead[1] and "new DB connections per run" in overhead[1]
    assert "verdicts HEALTHY" in overhead[1] and "median" in overhead[2]
    assert all("median" in row or "not installed (make bench installs it)" in row for row in overhead[3:])
    assert "## Machine" in result.stdout and "- Redis " in result.stdout


def test_the_quick_workers_section_runs_every_hosted_run_and_splits_the_start_latency():
    result = run_bench("--quick", "--only", "workers")

    assert result.returncode == 0, result.stderr[-3000:]
    workers = table_rows(result.stdout, "workers")
    assert len(workers) == 3
    assert "runs/min" in workers[0] and "6/6 complete, verdicts HEALTHY" in workers[0]
    assert "sent → received" in workers[1] and "p95" in workers[1]
    assert "not run" not in result.stdout


def test_it_says_in_one_line_that_redis_does_not_answer_and_exits_non_zero():
    result = run_bench("--quick", "--only", "workers", REDIS_URL="redis://127.0.0.1:1/0")

    assert result.returncode == 2
    assert "bench: Redis does not answer at redis://127.0.0.1:1/0 (ConnectionError)" in result.stderr
    assert HEADER not in result.stdout


def test_the_map_section_prints_the_time_to_lay_out_and_render_a_tiny_team_map():
    result = subprocess.run(
        [sys.executable, "-m", "bench.map", "--agents", "6", "--routes", "8", "--repeats", "2"],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    maps = table_rows(result.stdout, "map")
    assert [row.split(" | ")[1] for row in maps] == [
        "team map of 6 agents and 8 routes, one flat team",
        "team map of 6 agents and 8 routes in 5 nested teams (boxes)",
    ]
    assert all("ms median" in row and "layout" in row and "render" in row for row in maps)
    assert "8 arrows drawn" in maps[0]
