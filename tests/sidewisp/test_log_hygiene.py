"""No log line carries input values, whatever the error (issue 19 §2): plant a value, fail every way, grep the logs.

The logs are read as the project writes them: the console handler from settings.LOGGING, its stream
swapped for a buffer, every logger at DEBUG (Django's own too, which it keeps at INFO) and Django's query
lines on (as DEBUG=1 turns them on); caplog's records are read too, their exceptions formatted. On the
start-run 500 that this closes, the web log held the input's text from PostgreSQL's error context.
"""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.db import connection
from django.urls import reverse

from agents import tasks
from agents.host import hosting
from receipts import actions
from receipts.ingest import storable
from receipts.models import Run

pytestmark = pytest.mark.django_db(transaction=True)

GRAPHS = json.dumps(
    {
        "broken": "tests/agents/hosted_graph.py:make_broken_graph",
        "quoting": "tests/sidewisp/quoting_graph.py:make_graph",
    }
)


@dataclass
class Logs:
    written: io.StringIO
    caplog: pytest.LogCaptureFixture

    def assert_nowhere(self, planted: str) -> None:
        """`planted` is in no line the console handler wrote and in no record (message, arguments, traceback)."""
        assert self.caplog.records, "nothing was logged: the test would pass without looking"
        assert planted not in self.written.getvalue()
        plain = logging.Formatter("%(name)s %(message)s")
        for record in self.caplog.records:
            assert planted not in plain.format(record), record.name
            assert planted not in repr((record.msg, record.args, record.exc_info, record.exc_text)), record.name

    def lines(self) -> str:
        return self.written.getvalue()


@pytest.fixture
def logs(caplog) -> Iterator[Logs]:
    console = next(handler for handler in logging.getLogger().handlers if handler.get_name() == "console")
    written = io.StringIO()
    before = console.setStream(written)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django")  # Django keeps its own loggers at INFO: all of them, too
    connection.force_debug_cursor = True
    try:
        yield Logs(written, caplog)
    finally:
        connection.force_debug_cursor = False
        console.setStream(before)


@pytest.fixture
def planted() -> str:
    return f"zq-planted-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def hosted(settings):
    settings.SIDEWISP_GRAPHS = GRAPHS


@pytest.fixture
def olga(client, person, hosted):
    client.force_login(person("olga", "operator"))
    client.raise_request_exception = False
    return client


def start(client, raw: str, **fields):
    data = {"graph": "quoting", "graph_input": raw, "key": uuid.uuid4().hex, **fields}
    return client.post(reverse("sidewisp:run-create"), data)


def test_input_that_is_not_json_is_refused_without_logging_it(olga, logs, planted):
    response = start(olga, f'{{"messages": ["{planted}"], ')

    assert response.status_code == 400
    logs.assert_nowhere(planted)


def test_input_the_database_cannot_store_is_refused_without_logging_it(olga, logs, planted):
    response = start(olga, json.dumps({"messages": [planted], "n": 1}).replace("1}", "1e400}"))

    assert response.status_code == 400
    logs.assert_nowhere(planted)


def test_an_invalid_field_beside_the_input_is_refused_without_logging_the_input(olga, logs, planted):
    response = start(olga, json.dumps({"messages": [planted]}), operation_id="/etc/passwd", key="not-a-key")

    assert response.status_code == 400
    logs.assert_nowhere(planted)


def test_what_postgresql_refuses_past_the_check_is_refused_without_its_context(olga, logs, planted, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite stores a NUL in JSON")
    monkeypatch.setattr(storable, "json_problem", lambda value: None)  # the issue's own 500, as it was

    response = start(olga, json.dumps({"messages": [f"{planted}\x00"]}))

    assert response.status_code == 409
    logs.assert_nowhere(planted)
    assert "INSERT" in logs.lines()  # the query lines were on, their values were not in them


def test_a_database_error_that_becomes_a_500_logs_its_traceback_without_its_message(olga, logs, planted, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL's error context is the leak")

    def refused_by_postgresql(**kwargs):
        with connection.cursor() as cursor:  # the error's CONTEXT line quotes the input
            cursor.execute("SELECT %s::jsonb", [json.dumps(kwargs["graph_input"]).replace("]", ", Infinity]")])

    monkeypatch.setattr(actions, "start_run", refused_by_postgresql)

    response = start(olga, json.dumps({"messages": [planted]}))

    assert response.status_code == 500
    logs.assert_nowhere(planted)
    written = logs.lines()
    assert "ERROR django.request Internal Server Error: /runs/start/create/" in written
    assert "django.db.utils.DataError (SQLSTATE 22P02) [message not logged]" in written
    assert 'File "' in written and "refused_by_postgresql" in written  # the frames are kept


def test_a_graph_that_fails_to_build_fails_its_run_without_logging_the_input(hosted, logs, planted):
    run = hosting.start("broken", {"messages": [planted]})

    assert tasks.start_run.apply(args=(run.pk,)).get() == "failed"

    assert Run.objects.get(pk=run.pk).error == "ConfigServiceDown"
    logs.assert_nowhere(planted)


def test_a_graph_whose_error_quotes_its_input_fails_without_logging_it(hosted, logs, planted):
    run = hosting.start("quoting", {"messages": [planted]})

    assert tasks.start_run.apply(args=(run.pk,)).get() == "failed"

    assert Run.objects.get(pk=run.pk).error == "ValueError"
    logs.assert_nowhere(planted)


def test_a_query_line_keeps_its_time_verb_and_alias_and_drops_the_statement(logs, planted):
    Run.objects.filter(operation_id=planted).exists()

    assert "DEBUG django.db.backends (0." in logs.lines() and "SELECT; alias=default" in logs.lines()
    logs.assert_nowhere(planted)
