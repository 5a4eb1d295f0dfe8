"""What used to be a 500 from the database (issue 19 §2) is a 400 naming the field, or a 503 saying what was done.

"PostgreSQL down" is a real outage between the app and a real server: the test's connections go through a
TCP relay of its own (`DatabaseLink`) to the test database, and cutting the relay closes every connection
and refuses new ones, as a stopped server or a lost network does. On SQLite the database file's folder
stops existing instead (the driver cannot open it).
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator

import pytest
from django.db import OperationalError, connection
from django.urls import reverse

from receipts import actions
from receipts.ingest import storable
from receipts.models import AuditEntry, Decision, Handoff, Run
from sidewisp import pages
from tests.conftest import record_wait_for

pytestmark = pytest.mark.usefixtures("fake_runtime")

PLANTED = "zq-planted-4417"


def key() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def olga(client, person):
    client.force_login(person("olga", "operator"))
    client.raise_request_exception = False
    return client


def start(client, raw: str, **fields):
    data = {"graph": "support-desk", "graph_input": raw, "key": key(), **fields}
    return client.post(reverse("sidewisp:run-create"), data)


UNSTORABLE = {
    "a number past float": ('{"limit": 1e400, "note": "x"}', "The input holds a number that is not finite"),
    "a negative one": ('{"limit": -1e400}', "The input holds a number that is not finite"),
    "a NUL in a value": ('{"messages": ["refund\\u0000"]}', "The input holds a NUL character (\\u0000) at messages[0]"),
    "a NUL in a key": ('{"a\\u0000b": 1}', "The input holds a NUL character (\\u0000) in a key"),
    "a NUL in a nested key": ('{"deep": {"x": [{"k\\u0000": 1}]}}', "in a key at deep.x[0]"),
    "a lone surrogate": ('{"q": "\\ud800 hi"}', "The input holds an unpaired surrogate (\\ud800 to \\udfff) at q"),
    "a lone low surrogate": ('{"q": ["\\udfff"]}', "unpaired surrogate (\\ud800 to \\udfff) at q[0]"),
}


@pytest.mark.parametrize(("raw", "words"), UNSTORABLE.values(), ids=UNSTORABLE.keys())
def test_input_the_database_cannot_store_is_a_400_next_to_the_input_field(olga, raw, words):
    response = start(olga, raw)

    body = response.content.decode()
    assert response.status_code == 400
    assert words in body.replace("&#x27;", "'")
    assert 'id="id_graph_input"' in body and "which cannot be stored" in body
    assert not Run.objects.exists()


def test_a_surrogate_pair_is_text_like_any_other_and_starts_the_run(olga):
    response = start(olga, '{"q": "\\ud83d\\ude00"}')

    assert response.status_code == 302
    assert Run.objects.get().input == {"q": "\N{GRINNING FACE}"}


def test_the_start_action_refuses_such_input_itself_and_audits_no_value(person):
    olga = person("olga", "operator")

    result = actions.start_run(user=olga, graph="support-desk", graph_input={"m": f"{PLANTED}\x00"}, key=key())

    assert result.outcome == actions.Outcome.REFUSED
    assert result.message == "The input cannot be stored: it holds a NUL character (\\u0000)."
    entry = AuditEntry.objects.get()
    assert entry.outcome == "refused" and PLANTED not in json.dumps([entry.reason, entry.detail])
    assert not Run.objects.exists()


def test_what_postgresql_refuses_beyond_the_check_is_a_refusal_without_its_message(person, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("SQLite stores what PostgreSQL's jsonb refuses")
    monkeypatch.setattr(storable, "json_problem", lambda value: None)  # as if the check missed one
    olga = person("olga", "operator")

    result = actions.start_run(user=olga, graph="support-desk", graph_input={"m": f"{PLANTED}\x00"}, key=key())

    assert result.outcome == actions.Outcome.REFUSED
    assert result.message == "The database refused the input (DataError); nothing was started."
    assert PLANTED not in AuditEntry.objects.get().reason
    assert not Run.objects.exists()


# --- the list pages' query strings ------------------------------------------------------------


@pytest.fixture
def reader(client, person):
    """An admin (the audit log too) whose 500s come back as responses."""
    client.force_login(person("boss", "admin"))
    client.raise_request_exception = False
    return client


REFUSED_QUERIES = {
    "a NUL in the runs search": ("sidewisp:runs", "q=%00", "The parameter q holds a NUL character"),
    "a NUL in a name": ("sidewisp:runs", "ver%00dict=x", "The parameter ver\\x00dict holds a NUL character"),
    "a NUL in the audit actor": ("sidewisp:audit", "actor=a%00b", "The parameter actor holds a NUL character"),
    "a NUL in the CSV's filter": ("sidewisp:audit-csv", "action=%00", "The parameter action holds a NUL"),
    "a NUL in the overview window": ("sidewisp:overview", "window=%00", "The parameter window holds a NUL"),
    "a page past any list": (
        "sidewisp:false-completions",
        "page=99999999999999999999999",
        "The parameter page must be a whole number from 1 to 1,000,000.",
    ),
    "a waits page past any list": ("sidewisp:waits", "mine=1&page=10000000", "page must be a whole number"),
    "a page of words": ("sidewisp:waits", "page=last", "page must be a whole number"),
    "a cursor past bigint": (
        "sidewisp:runs",
        "older=99999999999999999999",
        "The parameter older must be a whole number from 1 to 9,223,372,036,854,775,807.",
    ),
    "an audit cursor past bigint": ("sidewisp:audit", "newer=9223372036854775808", "newer must be a whole number"),
    "a superscript page": ("sidewisp:runs", "page=%C2%B2", "page must be a whole number"),
}


@pytest.mark.parametrize(("name", "query", "words"), REFUSED_QUERIES.values(), ids=REFUSED_QUERIES.keys())
def test_a_query_no_filter_accepts_is_a_400_naming_the_parameter(reader, name, query, words):
    response = reader.get(f"{reverse(name)}?{query}")

    assert response.status_code == 400
    assert words in response.content.decode()
    assert "Request refused" in response.content.decode()


def test_the_run_page_refuses_an_absurd_timeline_page(reader, record_handoff):
    run_id = record_handoff("h-1", "op-1", "healthy").run_id

    response = reader.get(reverse("sidewisp:run-detail", args=[run_id]), {"page": "1" + "0" * 30})

    assert response.status_code == 400 and "page must be a whole number" in response.content.decode()


def test_a_deep_but_sane_page_number_still_goes_to_the_deepest_numbered_page(reader):
    response = reader.get(reverse("sidewisp:runs"), {"status": "queued", "page": "999999"})

    assert response.status_code == 302
    assert response["Location"] == f"{reverse('sidewisp:runs')}?status=queued&page=40"


def test_an_htmx_filter_gets_the_words_as_a_notice_and_keeps_its_page(reader):
    response = reader.get(f"{reverse('sidewisp:runs')}?q=%00", headers={"HX-Request": "true"})

    body = response.content.decode()
    assert response.status_code == 400
    assert (response["HX-Retarget"], response["HX-Reswap"], response["HX-Push-Url"]) == (
        "#request-notice",
        "innerHTML",
        "false",
    )
    assert "<html" not in body and 'role="alert"' in body and "The parameter q holds a NUL character" in body


def test_every_page_has_the_place_for_such_a_notice(reader):
    assert (
        '<div id="request-notice" class="request-notice"></div>'
        in reader.get(reverse("sidewisp:runs")).content.decode()
    )


@pytest.mark.parametrize(
    "query",
    [
        "page=runs&filters=q%3D%2500",
        "page=false&filters=page%3D99999999999999999999",
        "page=run&run=99999999999999999999",
        "page=run&run=%C2%B2",
    ],
)
def test_a_socket_asking_for_what_its_page_would_refuse_gets_no_scope(query):
    assert pages.PageScope.from_query_string(query.encode()) is None


# --- PostgreSQL down --------------------------------------------------------------------------


class DatabaseLink:
    """The test process's way to its database, which the test can cut like a lost network or a stopped server.

    PostgreSQL: a TCP relay on a free local port to the real server, which the default connection is pointed
    at; `cut()` closes the relay's listening socket and every relayed connection. SQLite: `cut()` points
    the connection at a file in a folder that does not exist.
    """

    def __init__(self) -> None:
        self.settings = connection.settings_dict
        self.saved = {name: self.settings[name] for name in ("HOST", "PORT", "NAME")}
        self.sockets: list[socket.socket] = []
        self.listener: socket.socket | None = None
        self.down = False
        if connection.vendor == "postgresql":
            self.listener = socket.create_server(("127.0.0.1", 0))
            threading.Thread(target=self._accept, daemon=True).start()
            self._point(HOST="127.0.0.1", PORT=str(self.listener.getsockname()[1]))

    def cut(self) -> None:
        if self.listener is None:
            self._point(NAME=f"/nonexistent-{uuid.uuid4().hex}/db.sqlite3")
            return
        self.down = True
        _close(self.listener)  # shutdown first: a close alone leaves the blocked accept() listening
        for sock in list(self.sockets):
            _close(sock)

    def restore(self) -> None:
        self._point(**self.saved)

    def _point(self, **changes: str) -> None:
        connection.close()
        self.settings.update(changes)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # cut
            if self.down:
                _close(client)
                return
            upstream = socket.create_connection((self.saved["HOST"] or "127.0.0.1", int(self.saved["PORT"] or 5432)))
            self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_relay, args=(source, sink), daemon=True).start()


def _relay(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


@pytest.fixture
def database_link(transactional_db) -> Iterator[DatabaseLink]:
    link = DatabaseLink()
    try:
        yield link
    finally:
        link.cut()  # the relay's threads end with their sockets
        link.restore()


@pytest.fixture
def approver(client, person, database_link):
    """ops-lead, logged in (the session is stored before any outage), about to approve."""
    client.force_login(person("ops-lead", "approver"))
    client.raise_request_exception = False
    return client


@pytest.fixture
def open_wait(record_handoff, database_link) -> Handoff:
    """A wait of ops-lead's on a hosted run (of a graph the stand-in runtime resumes)."""
    Run.objects.create(operation_id="op-wait", thread_id="th-wait", graph="support-desk", mode=Run.Mode.HOSTED)
    return record_wait_for(record_handoff("h-wait", "op-wait", "waiting"), owner="ops-lead")


def _approve(client, wait: Handoff):
    data = {"decision": "approve", "token": wait.wait_part["resume_token_id"], "key": key()}
    return client.post(reverse("sidewisp:wait-decide", args=[wait.pk]), data)


def test_approving_while_the_database_is_down_is_a_503_that_says_nothing_was_done(approver, open_wait, database_link):
    database_link.cut()

    response = _approve(approver, open_wait)

    database_link.restore()
    body = response.content.decode()
    assert response.status_code == 503 and response["Retry-After"] == "10"
    assert '<h1 id="unreachable-title">Database unreachable</h1>' in body
    assert "Nothing was done: no decision, change or audit entry was recorded." in body
    assert not Decision.objects.exists()
    assert not AuditEntry.objects.filter(action="wait.approve").exists()
    assert Handoff.objects.get(pk=open_wait.pk).wait_open


def test_the_same_approval_goes_through_once_the_database_is_back(approver, open_wait, database_link):
    database_link.cut()
    _approve(approver, open_wait)
    database_link.restore()

    response = _approve(approver, open_wait)

    assert response.status_code in (200, 303)  # its result page, or the way to it
    assert Decision.objects.get().kind == "approve"


@pytest.mark.parametrize("action", ["decide", "reopen"])
def test_a_database_lost_after_the_action_committed_says_part_was_recorded(
    approver, open_wait, database_link, monkeypatch, action, record_handoff, person
):
    done = getattr(actions, action)

    def then_lose_it(**kwargs):
        result = done(**kwargs)
        database_link.cut()  # committed; what the request does next (its page, its session) fails
        return result

    monkeypatch.setattr(actions, action, then_lose_it)
    if action == "decide":
        response = _approve(approver, open_wait)
    else:
        Run.objects.filter(operation_id="op-wait").update(status=Run.Status.COMPLETE)
        false = record_handoff("h-false", "op-wait", "false_complete")
        approver.force_login(person("oncall", "operator"))
        response = approver.post(reverse("sidewisp:task-reopen", args=[false.pk]), {"key": key(), "reason": "no"})

    database_link.restore()
    assert response.status_code == 503
    assert "Part of this request was recorded before the database went" in response.content.decode()
    assert AuditEntry.objects.filter(outcome="done").exists()


def test_a_page_read_while_the_database_is_down_is_a_503_that_changed_nothing(approver, database_link):
    database_link.cut()

    response = approver.get(reverse("sidewisp:runs"))

    assert response.status_code == 503
    assert "Nothing was done or changed; this page could not be read." in response.content.decode()


def test_an_htmx_request_while_the_database_is_down_gets_the_words_as_a_notice(approver, database_link):
    database_link.cut()

    response = approver.get(reverse("sidewisp:system"), headers={"HX-Request": "true"})

    body = response.content.decode()
    assert response.status_code == 503 and response["HX-Retarget"] == "#request-notice"
    assert "<html" not in body and 'data-notice="unreachable"' in body
    assert "The database is unreachable." in body


def test_healthz_says_the_database_is_down_without_a_500(client, database_link):
    database_link.cut()

    response = client.get("/healthz")

    assert response.status_code == 503
    assert response.json()["checks"]["database"] == {"ok": False, "detail": "OperationalError"}


def test_the_outage_is_real_the_open_connection_breaks_and_no_new_one_opens(database_link):
    assert Run.objects.count() == 0  # a connection through the link is open
    database_link.cut()

    with pytest.raises(OperationalError):
        Run.objects.count()
    connection.close()
    with pytest.raises(OperationalError):
        connection.ensure_connection()
