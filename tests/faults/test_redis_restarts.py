"""The worker survives broker restarts: 10 Redis crashes under load, nothing lost, /healthz never a 500.

The Redis here is the test's own (tests/faults/conftest.py), with append-only persistence as a
production broker runs; the worker process and this process's Celery app and health checks use it.
"""

from __future__ import annotations

import os
import time

import pytest
import redis
from django.test import Client
from kombu.exceptions import KombuError

from agents import tasks
from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from receipts.models import Run
from tests.conftest import point_celery_at, start_worker_process, wait_until
from tests.faults.test_runs_end import ENDED, assert_every_run_ended

pytestmark = [pytest.mark.faults, pytest.mark.worker, pytest.mark.django_db(transaction=True)]

RESTARTS = 10
SCENARIOS = ("healthy_purchase", "slow_supplier_purchase", "waiting_on_approval", "healthy_support")


@pytest.fixture(autouse=True)
def contracts(transactional_db):
    install_team_contracts()


def test_the_worker_survives_ten_redis_restarts_under_load(celery_isolation, private_redis, settings):
    settings.REDIS_URL = private_redis.url  # what /healthz pings
    settings.SIDEWISP_WORKER_PING_TIMEOUT = 0.5
    web = Client(raise_request_exception=False)
    health: list[int] = []
    recoveries: list[float] = []
    runs: list[Run] = []
    with point_celery_at(private_redis.url):
        worker = start_worker_process(f"blips{os.getpid()}", celery_isolation, redis_url=private_redis.url)
        try:
            for restart in range(RESTARTS):
                for name in SCENARIOS[restart % 2 :: 2]:
                    run = create_run(name)
                    tasks.start_run.delay(run.pk)
                    runs.append(run)
                time.sleep(0.8)  # some of them are running now, their messages unacked
                private_redis.kill()
                health.append(web.get("/healthz").status_code)
                time.sleep(0.3)
                private_redis.start()
                down_at = time.monotonic()
                wait_until(lambda: _answers(worker), what=f"the worker after restart {restart + 1}", timeout=60)
                recoveries.append(time.monotonic() - down_at)
                health.append(web.get("/healthz").status_code)
                assert worker.process.poll() is None, "the worker exited"
            wait_until(
                lambda: all(_status(run) in ENDED for run in runs), what="every run to end", timeout=120, interval=0.5
            )
            assert worker.process.poll() is None, "the worker exited"
        finally:
            worker.stop()

    ended = {str(status): sum(1 for run in runs if _status(run) == status) for status in sorted(ENDED)}
    print(
        f"\n{RESTARTS} Redis restarts, {len(runs)} runs: {ended}; worker answered again after "
        f"max {max(recoveries):.1f} s, median {sorted(recoveries)[len(recoveries) // 2]:.1f} s; "
        f"/healthz answers {sorted(set(health))}"
    )
    assert 500 not in health
    assert health[-1] == 200
    assert not Run.objects.filter(status=Run.Status.FAILED).exists()
    assert_every_run_ended()


def _answers(worker) -> bool:
    # This process's pooled broker connection may be the one the restart broke: that is a "not yet".
    try:
        return worker.answers()
    except (OSError, redis.RedisError, KombuError):
        return False


def _status(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)
