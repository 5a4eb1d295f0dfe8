"""audit.csv streamed from the database: the same bytes whichever path writes them, spreadsheet-safe, bounded."""

from __future__ import annotations

import csv
import io

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from receipts.models import AuditEntry
from receipts.org import audit
from sidewisp.pages import AuditQuery, auditcsv

REASONS = ("=1+1", "+sum", "-2", "@cmd", "\tTab", "\rcr", 'a "quoted", comma', "two\nlines", "", "plain")


@pytest.fixture
def entries():
    for n, reason in enumerate(REASONS):
        audit.log(actor=None, action="wait.expire", object_type="handoff", object_id=n, outcome="done", reason=reason)


def _download(client) -> bytes:
    response = client.get(reverse("sidewisp:audit-csv"))
    assert response.status_code == 200 and response.streaming
    return b"".join(response.streaming_content)


def _rows(content: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(content.decode(), newline="")))


def test_every_cell_a_spreadsheet_would_run_is_text_and_quoting_survives(client, person, entries):
    client.force_login(person("oncall", "operator"))

    rows = _rows(_download(client))

    assert rows[0] == list(auditcsv.COLUMNS)
    assert [r[8] for r in rows[1:]] == [
        "plain",
        "",
        "two\nlines",
        'a "quoted", comma',
        "'\rcr",
        "'\tTab",
        "'@cmd",
        "'-2",
        "'+sum",
        "'=1+1",
    ]
    newest = AuditEntry.objects.order_by("-at", "-pk").first()
    assert rows[1][0] == newest.at.isoformat(timespec="microseconds") and rows[1][1] == "system"


def test_the_database_writes_the_same_cells_as_python_would(client, person, entries):
    if connection.vendor != "postgresql":
        pytest.skip("the COPY path is PostgreSQL's; elsewhere the Python writer is the only path")
    oncall = person("oncall", "operator")
    client.force_login(oncall)

    written = b"".join(auditcsv._written(AuditQuery({}, oncall).entries))

    downloaded = _download(client)
    assert _rows(downloaded) == _rows(written) and len(_rows(written)) == len(REASONS) + 1


def test_the_export_stops_at_its_limit_newest_first(client, person, entries, monkeypatch):
    monkeypatch.setattr(auditcsv, "LIMIT", 3)
    client.force_login(person("oncall", "operator"))

    with CaptureQueriesContext(connection) as queries:
        rows = _rows(_download(client))

    assert [r[4] for r in rows[1:]] == ["9", "8", "7"]
    assert len(queries) <= 8  # session, user, permissions, the filter's actions, the rows: never one per row
