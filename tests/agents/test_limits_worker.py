"""A new limit fires on the next run driven by a real Celery worker process."""

from __future__ import annotations

import pytest

from agents import limits, tasks
from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.models import LimitsVersion
from receipts.models import MiddlewareReport, Run
from tests.conftest import wait_until

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

SETTLED = {Run.Status.COMPLETE, Run.Status.FAILED, Run.Status.WAITING, Run.Status.PARKED}


def _settled(run: Run) -> bool:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk) in SETTLED


def test_a_new_tool_call_limit_fires_on_the_next_run_in_a_worker(worker_process):
    install_team_contracts()
    document = LimitsVersion.current().document
    version = LimitsVersion.save_new({**document, "agents": {"sales": {"tool_call_limit": {"run_limit": 1}}}})
    run = create_run("slow_supplier_purchase")

    tasks.start_run.delay(run.pk)
    wait_until(lambda: _settled(run), what="the run to settle")

    report = MiddlewareReport.objects.get(run=run, kind=MiddlewareReport.Kind.CALL_LIMIT)
    assert (report.agent, report.detail) == ("sales", {"tool": "confirm_with_supplier"})
    assert limits.effective_stack(run)["version"] == version.number
