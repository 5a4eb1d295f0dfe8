"""Issue 32 §5: what lets the suite run in parallel (pytest-xdist) and quickly, without one test seeing another's.

Each test process (a `make test` run, or one xdist worker of it) has a name of its own (celery_isolation): its
Celery queue, control exchange, channel-layer prefix and cache key prefix, in this process and in the worker
processes and servers it starts. A transactional test's flush leaves every table empty (tests/conftest.py
quick_flush), as Django's TRUNCATE does.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection

from receipts.models import Handoff, Receipt, VerdictBucket


def test_this_process_caches_under_its_own_prefix_so_a_parallel_run_never_bumps_its_keys(celery_isolation):
    from receipts.org import teams

    assert celery_isolation == f"sidewisp-test-{os.getpid()}"
    assert settings.CACHES["default"]["KEY_PREFIX"] == settings.CELERY_TASK_DEFAULT_QUEUE == celery_isolation
    # The team switcher's generation, the key parallel runs used to bump for each other, is this process's own.
    assert cache.make_key(teams._GENERATION).startswith(f"{celery_isolation}:")
    assert settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] == celery_isolation


def test_a_process_started_with_the_queue_name_caches_under_the_same_prefix(celery_isolation):
    """A worker or daphne the tests start (SIDEWISP_QUEUE=the name) reads and writes the same cache keys."""
    script = "from django.conf import settings; print(settings.CACHES['default']['KEY_PREFIX'])"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "sidewisp.settings", "SIDEWISP_QUEUE": celery_isolation}
    shown = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {script}"],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert shown.stdout.strip().splitlines()[-1] == celery_isolation


@pytest.mark.django_db(transaction=True)
def test_the_flush_after_a_transactional_test_leaves_every_table_empty(record_handoff, roles):
    record_handoff("h-flush-1", "op-flush-1", "healthy")
    record_handoff("h-flush-2", "op-flush-2", "false_complete")
    assert Handoff.objects.count() == 2 and Receipt.objects.exists()
    if connection.vendor == "postgresql":
        assert VerdictBucket.objects.exists()  # filled by the handoff trigger, which a DELETE fires again

    call_command("flush", verbosity=0, interactive=False, inhibit_post_migrate=True)  # what the teardown runs

    tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    with connection.cursor() as cursor:
        rows = {}
        for table in tables:
            cursor.execute(f"SELECT COUNT(*) FROM {connection.ops.quote_name(table)}")
            rows[table] = cursor.fetchone()[0]
    assert {table: n for table, n in rows.items() if n} == {}


def test_a_parallel_run_hands_out_fault_tests_and_virtualenv_modules_as_units_browser_modules_whole():
    from tests.conftest import xdist_scope

    faults = [
        "tests/faults/test_kill_at_boundary.py::test_a_run_whose_worker_is_killed_at_a_receipt_boundary_ends[a-1]",
        "tests/faults/test_runs_end.py::test_sixteen_runs_started_at_once_on_a_fresh_database_all_end",
    ]
    assert {xdist_scope(nodeid) for nodeid in faults} == {"tests/faults/"}
    browser = ["tests/e2e/test_phone.py::test_on_a_phone_no_page_scrolls_sideways[/]", "tests/e2e/test_phone.py::b"]
    assert {xdist_scope(nodeid) for nodeid in browser} == {"tests/e2e/test_phone.py"}
    assert xdist_scope("tests/e2e/test_a11y.py::test_a") != xdist_scope("tests/e2e/test_phone.py::test_b")
    venv = ["tests/agents/test_agent_package.py::test_x", "tests/agents/test_agent_venv_swarm.py::test_y[observe]"]
    assert len({xdist_scope(nodeid) for nodeid in venv}) == 1  # the two share the one virtualenv they build
    for nodeid in ("tests/receipts/test_bundle.py::test_a", "tests/receipts/test_bundle.py::test_b[1]"):
        assert xdist_scope(nodeid) == nodeid


def test_a_parallel_run_hands_out_units_in_collection_order_so_no_flush_comes_before_the_tests_it_would_empty():
    """xdist's scope scheduler hands the biggest units out first by default: the fault tests and the browser
    modules (which flush the database) then ran before the tests that read what the migrations made."""
    from types import SimpleNamespace

    from tests.conftest import pytest_xdist_make_scheduler

    option = SimpleNamespace(loadscopereorder=True, maxschedchunk=None)
    config = SimpleNamespace(option=option, getvalue=lambda name: "loadgroup")

    scheduler = pytest_xdist_make_scheduler(config, log=None)

    assert scheduler is not None and config.option.loadscopereorder is False
