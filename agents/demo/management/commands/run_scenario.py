"""Run demo scenarios and compare each handoff's verdict with the expected one."""

from __future__ import annotations

import json
import time

from django.core.management.base import BaseCommand, CommandError

from agents.demo.scenarios import SCENARIOS, create_run
from receipts.models import Run

SETTLED = {Run.Status.COMPLETE, Run.Status.FAILED, Run.Status.WAITING, Run.Status.PARKED}
WORKER_HINT = "no Celery worker answered; start one with `make run` or `.venv/bin/celery -A sidewisp worker -l info`"


class Command(BaseCommand):
    help = "Run one scenario (or --all) and print each handoff's verdict beside the expected one."

    def add_arguments(self, parser):
        parser.add_argument("name", nargs="?", choices=sorted(SCENARIOS))
        parser.add_argument("--all", action="store_true", help="run every scenario of the catalogue")
        parser.add_argument("--inline", action="store_true", help="run in this process instead of on a worker")
        parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for each run")
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="emulate the tools (LLMToolEmulator): no order, ticket, refund or shell command; verdicts are shown, "
            "not compared, since outcome verifiers find nothing done",
        )

    def handle(self, *args, name=None, all=False, inline=False, timeout=120.0, dry_run=False, **options):
        if bool(name) == bool(all):
            msg = "give one scenario NAME or --all"
            raise CommandError(msg)
        names = sorted(SCENARIOS) if all else [name]
        runs = [create_run(n, dry_run=dry_run) for n in names]
        if inline:
            from agents.host import runner

            for run in runs:
                runner.start_run(run)
        else:
            self._enqueue(runs, timeout)
        total = matched = 0
        for run in runs:
            for handoff, expected in _pairs(run):
                total += 1
                matched += handoff.verdict == expected
                line = {"scenario": run.scenario, "handoff_id": handoff.handoff_id, "verdict": handoff.verdict}
                self.stdout.write(json.dumps({**line, "expected": expected, **({"dry_run": True} if dry_run else {})}))
        self.stdout.write(f"{total} handoffs, {matched} as expected, {total - matched} not")
        if dry_run:
            self.stdout.write("dry run: nothing was done, so outcome verifiers fail by design; nothing compared")
        elif matched != total:
            raise SystemExit(1)

    def _enqueue(self, runs: list[Run], timeout: float) -> None:
        from agents import tasks
        from sidewisp.celery import app

        if not app.control.ping(timeout=1):
            self.stderr.write(WORKER_HINT)
            raise SystemExit(2)
        for run in runs:
            tasks.start_run.delay(run.pk)
        deadline = time.monotonic() + timeout
        pending = {run.pk for run in runs}
        while pending:
            if time.monotonic() > deadline:
                msg = f"{len(pending)} run(s) did not settle within {timeout:.0f} s"
                raise CommandError(msg)
            time.sleep(0.2)
            settled = Run.objects.filter(pk__in=pending, status__in=SETTLED).values_list("pk", flat=True)
            pending -= set(settled)


def _pairs(run: Run):
    """Each handoff of the run (in order) with the verdict its scenario expects ("" when none)."""
    run.refresh_from_db()
    handoffs = list(run.handoffs.order_by("created_at", "pk"))
    expected = list(SCENARIOS[run.scenario].expected)
    expected += ["NONE"] * (len(handoffs) - len(expected))
    pairs = list(zip(handoffs, expected, strict=False))
    for missing in expected[len(handoffs) :]:
        pairs.append((_Missing(), missing))
    return pairs


class _Missing:
    handoff_id = None
    verdict = "MISSING"
