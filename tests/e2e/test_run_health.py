"""Run health and the system banner in a real headless Chromium, against daphne and a real Celery worker.

A run whose model died after a sound handoff fails; its handoff verdict stays healthy, but nothing on
the run page, the runs list or the overview shows that run green. A worker that stops is a banner on
the open page within 10 s, pushed over the socket.
"""

from __future__ import annotations

import pytest

from tests.conftest import wait_until
from tests.e2e.test_live_pages import csp_errors, expect, in_db_thread, log_in, shoot, wait_live

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]
BANNER_TIMEOUT_MS = 10_000


@pytest.fixture
def worker_options() -> dict:
    # Beat embedded, as in production: its heartbeat keeps the banner quiet while everything runs.
    return {"beat": True}


def _start(scenario: str) -> int:
    from agents import tasks
    from agents.demo.contracts import install_team_contracts
    from agents.demo.scenarios import create_run

    install_team_contracts()
    run = create_run(scenario)
    tasks.start_run.delay(run.pk)
    return run.pk


def _run(run_id: int) -> dict:
    from receipts.models import Handoff, Run

    found = Run.objects.values("status", "health").get(pk=run_id)
    found["handoffs"] = list(Handoff.objects.filter(run_id=run_id).values_list("pk", "verdict"))
    return found


@pytest.fixture
def dead_model_run(worker_process) -> dict:
    """The demo's dead_model_after_handoff, run by the real worker to its end: failed, its handoff healthy."""
    run_id = in_db_thread(_start, "dead_model_after_handoff")
    wait_until(lambda: in_db_thread(_run, run_id)["status"] == "failed", what="the run to fail", timeout=90)
    found = in_db_thread(_run, run_id)
    assert found["handoffs"] and {verdict for _, verdict in found["handoffs"]} == {"HEALTHY"}
    return {"id": run_id, "handoff": found["handoffs"][0][0]}


def test_a_failed_run_is_not_green_on_the_run_page_the_runs_list_or_the_overview(page, server, dead_model_run):
    run_id, handoff = dead_model_run["id"], dead_model_run["handoff"]
    log_in(page, server)

    page.goto(f"{server.url}/runs/{run_id}/")
    wait_live(page)
    run = page.locator(f"#run-{run_id}")
    expect(run.locator(".run-health [data-health]")).to_have_attribute("data-health", "failing")
    expect(run.locator(".run-health")).to_contain_text("Model failed (3 attempts)")
    expect(run.locator(".tone-ok")).to_have_count(0)
    shoot(page, "run-health-run-page")

    page.goto(f"{server.url}/runs/")
    row = page.locator(f"#run-row-{run_id}")
    expect(row.locator("[data-health]")).to_have_attribute("data-health", "failing")
    expect(row.locator(".tone-ok")).to_have_count(0)
    page.goto(f"{server.url}/runs/?health=healthy")
    expect(page.locator(f"#run-row-{run_id}")).to_have_count(0)

    page.goto(f"{server.url}/")
    wait_live(page)
    expect(page.locator('[data-health-count="failing"]')).to_have_text("1")
    expect(page.locator(f"#newest-{handoff} .tone-ok")).to_have_count(0)
    expect(page.locator(f"#newest-{handoff}")).to_be_visible()
    shoot(page, "run-health-overview")
    assert csp_errors(page) == []


def test_a_stopped_worker_is_a_banner_within_ten_seconds(page, server, worker_process):
    log_in(page, server)
    wait_live(page)
    # Beat's first heartbeat may take a moment after the worker starts.
    expect(page.locator("#system-marker")).to_have_attribute("data-system", "ok", timeout=20_000)
    expect(page.locator("#system-banner")).to_have_attribute("data-system", "ok")

    worker_process.stop()

    banner = page.locator("#system-banner")
    expect(banner).to_have_attribute("data-system", "down", timeout=BANNER_TIMEOUT_MS)
    expect(banner).to_contain_text("No Celery worker is answering")
    expect(page.locator("#system-marker")).to_have_attribute("data-system", "down")
    # The socket itself is still connected: the two facts are told apart.
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    shoot(page, "system-banner")
    assert csp_errors(page) == []
