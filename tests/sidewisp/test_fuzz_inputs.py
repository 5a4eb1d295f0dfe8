"""Whatever a browser or a script sends, no page and no form answers 500 (issue 19 §2), on the real database.

Every GET filter of every list page and every operator form (and the admin's limits and contracts forms)
gets query strings and bodies built by hypothesis from raw bytes, invalid UTF-8, NUL, huge and odd numbers,
JSON with Infinity, NUL and lone surrogates, and the values the fields expect. Each example runs in a
savepoint that is rolled back, so none sees another's writes. A baseline request per target shows that it is
reached at all (a fuzz of a page that only ever answers 403 could not fail).
"""

from __future__ import annotations

import json
import uuid
from urllib.parse import quote_from_bytes

import pytest
from django.db import transaction
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from receipts.models import Run
from tests.conftest import record_wait_for

pytestmark = pytest.mark.usefixtures("fake_runtime")

EXAMPLES = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
NASTY = [
    "", "0", "1", "-1", "2", "40", "41", "1000000", "1000001", "99999999999999999999999", "9223372036854775808",
    "1e400", "-1e400", "NaN", "inf", "1.5", "²", "١٢", "\x00", "a\x00b", "\ufffd", "\u202e", "' OR 1=1 --", "%", "_",
    "\\", "x" * 300, "2024-02-30T25:61", "0001-01-01T00:00", "9999-12-31T23:59:59", "2026-01-01T00:00",
    "FALSE_COMPLETE", "HEALTHY", "queued", "failed", "24h", "15m", "failing", "support-desk", "routes/1",
    "triage", "sales", "ops-lead", "approve", "reject", "edit", "done", "refused", "1",
]  # fmt: skip
PLAIN = st.one_of(
    st.sampled_from(NASTY).map(str.encode),
    st.text(max_size=40).map(str.encode),
    st.binary(max_size=24),  # invalid UTF-8 too: an encoded surrogate is b"\xed\xa0\x80"
    st.integers().map(lambda n: str(n).encode()),  # past any page, row id or bigint
)
# A NUL in about a quarter of the values: PostgreSQL refuses it in any text, wherever a filter takes it.
VALUES = st.one_of(PLAIN, PLAIN, PLAIN, st.tuples(PLAIN, PLAIN).map(lambda two: two[0] + b"\x00" + two[1]))


def pairs(names: list[str]):
    """1 to 5 (name, value) pairs: mostly the target's own names, sometimes any bytes as the name."""
    own = st.sampled_from(names).map(str.encode)
    name = st.one_of(own, own, own, st.binary(min_size=1, max_size=8))
    return st.lists(st.tuples(name, VALUES), min_size=1, max_size=5)


def encoded(items: list[tuple[bytes, bytes]]) -> str:
    return "&".join(f"{quote_from_bytes(name)}={quote_from_bytes(value)}" for name, value in items)


def no_500(client: Client, method: str, path: str, items: list[tuple[bytes, bytes]]) -> int:
    """The status of one request (a streamed body read to its end), in a savepoint rolled back afterwards."""
    with transaction.atomic():
        if method == "GET":
            response = client.get(f"{path}?{encoded(items)}")
        else:
            response = client.post(path, encoded(items).encode(), content_type="application/x-www-form-urlencoded")
        if response.streaming:
            b"".join(response.streaming_content)
        transaction.set_rollback(True)
    assert response.status_code < 500, (method, path, items, response.status_code)
    return response.status_code


@pytest.fixture
def boss(client, person):
    """An admin (staff, every role permission) whose errors come back as responses."""
    client.force_login(person("boss", "admin", is_staff=True))
    client.raise_request_exception = False
    return client


@pytest.fixture
def world(record_handoff):
    """Rows for every filter to find: handoffs of each kind, a wait on a hosted run, an audit entry."""
    for kind in ("healthy", "false_complete", "stale_control"):
        record_handoff(f"h-{kind}", f"op-{kind}", kind)
    Run.objects.create(operation_id="op-wait", thread_id="th-wait", graph="support-desk", mode=Run.Mode.HOSTED)
    wait = record_wait_for(record_handoff("h-wait", "op-wait", "waiting"), owner="boss")
    false = Run.objects.get(operation_id="op-false_complete")
    Run.objects.filter(pk=false.pk).update(mode=Run.Mode.HOSTED, graph="support-desk")
    return {"wait": wait, "false": false.handoffs.get(), "run": false}


RUN_FILTERS = ["q", "health", "window", "verdict", "graph", "route_version", "agent", "sender", "receiver"]
RUN_FILTERS += ["status", "since", "until", "page", "older", "newer"]
AUDIT_FILTERS = ["actor", "action", "verdict", "outcome", "since", "until", "page", "older", "newer"]
LIST_PAGES = {
    "overview": ("sidewisp:overview", ["window"]),
    "runs": ("sidewisp:runs", RUN_FILTERS),
    "waits": ("sidewisp:waits", ["mine", "page"]),
    "false completions": ("sidewisp:false-completions", ["page"]),
    "audit": ("sidewisp:audit", AUDIT_FILTERS),
    "audit.csv": ("sidewisp:audit-csv", AUDIT_FILTERS),
    "team map": ("sidewisp:map", ["window", "graph", "route_version"]),
}


@pytest.mark.parametrize(("url_name", "names"), LIST_PAGES.values(), ids=LIST_PAGES.keys())
def test_no_filter_of_a_list_page_is_a_500(boss, world, url_name, names):
    path = reverse(url_name)
    assert no_500(boss, "GET", path, [(names[0].encode(), b"")]) == 200

    @EXAMPLES
    @given(items=pairs(names))
    def fuzz(items):
        no_500(boss, "GET", path, items)

    fuzz()


def test_no_query_of_the_run_page_is_a_500(boss, world):
    path = reverse("sidewisp:run-detail", args=[world["run"].pk])
    assert no_500(boss, "GET", path, [(b"page", b"1")]) == 200

    @EXAMPLES
    @given(items=pairs(["page"]))
    def fuzz(items):
        no_500(boss, "GET", path, items)

    fuzz()


# --- the forms --------------------------------------------------------------------------------

JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(exclude_categories=()), max_size=12)  # lone surrogates and NUL too
)
JSON_TEXT = st.one_of(
    st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner))
    .map(lambda value: {"messages": value})
    .map(lambda value: json.dumps(value, allow_nan=True)),  # Infinity, NaN and \ud800 escapes in the text
    st.dictionaries(st.text(alphabet=st.characters(exclude_categories=()), max_size=6), JSON_LEAVES, max_size=3).map(
        json.dumps
    ),
    st.sampled_from(['{"a": 1e400}', '{"a\\u0000": 1}', '{"a": "\\ud800"}', "[" * 2000, '{"a": 1' + "0" * 5000 + "}"]),
    st.text(max_size=40),
).map(str.encode)


def form(fields: dict):
    """One body of the form: each field from its strategy, any of them left out or replaced by anything."""
    chosen = {name: st.one_of(strategy, VALUES) for name, strategy in fields.items()}
    whole = st.fixed_dictionaries({}, optional=chosen).map(lambda data: [(k.encode(), v) for k, v in data.items()])
    return st.tuples(whole, pairs(list(fields))).map(lambda both: both[0] + both[1][:1])


def keys():
    return st.just(uuid.uuid4().hex.encode()) | st.builds(lambda: uuid.uuid4().hex.encode())


FORMS = {
    "start run": (
        lambda w: reverse("sidewisp:run-create"),
        lambda w: {"graph": st.just(b"support-desk"), "graph_input": JSON_TEXT, "operation_id": VALUES, "key": keys()},
    ),
    "decision": (
        lambda w: reverse("sidewisp:wait-decide", args=[w["wait"].pk]),
        lambda w: {
            "decision": st.sampled_from([b"approve", b"reject", b"edit"]),
            "token": st.just(w["wait"].wait_part["resume_token_id"].encode()),
            "key": keys(),
            "reason": VALUES,
            "arg_sku": VALUES,
            "arg_quantity": VALUES,
        },
    ),
    "reassign": (
        lambda w: reverse("sidewisp:wait-reassign", args=[w["wait"].pk]),
        lambda w: {"owner": st.sampled_from([b"boss", b"ops-lead"]), "deadline_minutes": VALUES, "key": keys()},
    ),
    "cancel": (
        lambda w: reverse("sidewisp:wait-cancel", args=[w["wait"].pk]),
        lambda w: {"key": keys(), "reason": VALUES},
    ),
    "reopen": (
        lambda w: reverse("sidewisp:task-reopen", args=[w["false"].pk]),
        lambda w: {"key": keys(), "reason": VALUES},
    ),
    "verify again": (
        lambda w: reverse("sidewisp:task-verify", args=[w["false"].pk]),
        lambda w: {"key": keys(), "reason": VALUES},
    ),
    "stop auto-continue": (
        lambda w: reverse("sidewisp:run-stop", args=[w["run"].pk]),
        lambda w: {"key": keys(), "reason": VALUES},
    ),
    "limits": (
        lambda w: "/admin/agents/limitsversion/add/",
        lambda w: {"document": JSON_TEXT, "note": VALUES},
    ),
    "contracts": (
        lambda w: "/admin/receipts/contractversion/add/",
        lambda w: {"version": VALUES, "routes": JSON_TEXT, "steps": JSON_TEXT, "note": VALUES, "based_on": VALUES},
    ),
}


@pytest.mark.parametrize(("path_of", "fields_of"), FORMS.values(), ids=FORMS.keys())
def test_no_body_of_a_form_is_a_500(boss, world, path_of, fields_of):
    path, fields = path_of(world), fields_of(world)
    assert no_500(boss, "POST", path, [(b"key", uuid.uuid4().hex.encode())]) != 403  # reached, not denied

    @EXAMPLES
    @given(items=form(fields))
    def fuzz(items):
        no_500(boss, "POST", path, items)

    fuzz()
