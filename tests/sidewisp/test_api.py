"""The receipts API: source tokens (missing, revoked, wrong scope), bundles and entries stored all or nothing,
idempotent, rate-limited, fuzzed input never a 500; remote decisions claimed once; tokens made in the admin."""

from __future__ import annotations

import json
import uuid

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from receipts.models import AuditEntry, Handoff, MiddlewareReport, Receipt, Run, SourceToken
from receipts.verdicts import bundle
from receipts.workers import sources
from tests.conftest import handoff_parts

RECEIPTS = "/api/v1/receipts"


@pytest.fixture
def token_for(db):
    """token_for("billing") is a fresh token (the raw string) of that source."""

    def _token(source: str = "billing") -> str:
        return sources.issue(source, note="tests")[1]

    return _token


@pytest.fixture
def billing(token_for) -> str:
    return token_for("billing")


def post(client, token: str | None, body: object, *, content_type: str = "application/json", raw: bytes | None = None):
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    data = raw if raw is not None else json.dumps(body)
    return client.post(RECEIPTS, data=data, content_type=content_type, headers=headers)


def a_bundle(kind: str = "healthy", *, operation_id: str | None = None, handoff_id: str | None = None) -> dict:
    token = uuid.uuid4().hex[:8]
    return {
        "schema": bundle.SCHEMA,
        "handoff_id": handoff_id or f"h-{token}",
        "operation_id": operation_id or f"op-{token}",
        **{part: value for part, value in handoff_parts(kind) if part != "final_status"},
        "final_status": dict(handoff_parts(kind)).get("final_status"),
    }


def entries_of(b: dict) -> list[dict]:
    parts = [(part, b[part]) for part in (*bundle.PARTS, "final_status") if b.get(part) is not None]
    return [
        {"kind": "part", "operation_id": b["operation_id"], "handoff_id": b["handoff_id"], "part": p, "value": v}
        for p, v in parts
    ]


def nothing_written() -> bool:
    return not (Run.objects.exists() or Receipt.objects.exists() or MiddlewareReport.objects.exists())


# --- tokens ----------------------------------------------------------------------------


def test_it_refuses_a_post_without_a_token(client, contracts):
    response = post(client, None, a_bundle())

    assert response.status_code == 401
    assert response.json()["error"]["field"] == "Authorization"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert nothing_written()


@pytest.mark.parametrize("raw", ["nonsense", "swt_000000000000_" + "A" * 43, "Basic dXNlcjpwdw=="])
def test_it_refuses_a_token_it_does_not_know(client, contracts, billing, raw):
    assert post(client, raw, a_bundle()).status_code == 401
    assert nothing_written()


def test_it_refuses_a_token_whose_secret_is_wrong(client, contracts, billing):
    forged = billing[: -len("x")] + ("A" if billing[-1] != "A" else "B")

    assert post(client, forged, a_bundle()).status_code == 401


def test_it_refuses_a_revoked_token(client, contracts, billing):
    sources.revoke(SourceToken.objects.get(), by=None)

    response = post(client, billing, a_bundle())

    assert response.status_code == 401
    assert nothing_written()


def test_a_token_never_writes_a_run_another_source_created(client, contracts, billing, token_for):
    # issue 29 §4 (was: refused naming the owner): the same ids are the other source's own run and handoff.
    first = a_bundle()
    assert post(client, billing, first).status_code == 200

    response = post(client, token_for("shipping"), first)

    assert response.status_code == 200
    runs = Run.objects.filter(operation_id=first["operation_id"])
    assert sorted(runs.values_list("source_name", flat=True)) == ["billing", "shipping"]
    for run in runs:
        assert Receipt.objects.filter(handoff__run=run).count() == len(entries_of(first))


def test_a_token_never_writes_a_local_run(client, record_handoff, billing):
    local = record_handoff("h-local", "op-local", "healthy")
    before = Receipt.objects.filter(handoff=local).count()

    response = post(client, billing, a_bundle("false_complete", operation_id="op-local", handoff_id="h-local"))

    assert response.status_code == 200
    local.refresh_from_db()
    assert (local.verdict, Receipt.objects.filter(handoff=local).count()) == ("HEALTHY", before)
    assert Run.objects.get(operation_id="op-local", source_name="billing").handoffs.get().handoff_id == "h-local"


def test_only_a_digest_of_the_token_is_stored(billing):
    token = SourceToken.objects.get()

    assert billing.split("_")[-1] not in json.dumps(list(SourceToken.objects.values()), default=str)
    assert sources.authenticate(billing) == token
    assert AuditEntry.objects.get(action="source_token.create").detail == {"source": "billing", "key_id": token.key_id}


# --- storing ---------------------------------------------------------------------------


def test_it_stores_a_valid_bundle_on_a_run_of_its_source(client, contracts, billing):
    sent = a_bundle("healthy")

    response = post(client, billing, sent)

    assert response.status_code == 200
    assert response.json() == {"entries": [{"stored": True}] * 5}
    handoff = Handoff.objects.get(handoff_id=sent["handoff_id"])
    assert (handoff.verdict, handoff.run.source_name, handoff.run.mode) == ("HEALTHY", "billing", Run.Mode.OBSERVED)
    assert handoff.run.status == Run.Status.COMPLETE  # the app's claimed status: it keeps no run row itself


def test_it_stores_a_list_of_bundles_and_a_list_of_entries(client, contracts, billing):
    waiting, healthy = a_bundle("waiting"), a_bundle("healthy")
    report = {
        "kind": "report",
        "operation_id": healthy["operation_id"],
        "agent": "sales",
        "report": "retry_exhausted",
        "detail": {"tool": "place_order", "attempts": 3},
        "attempt": "1",
    }

    assert post(client, billing, [waiting]).status_code == 200
    assert post(client, billing, {"entries": [*entries_of(healthy), report]}).status_code == 200

    verdicts = dict(Handoff.objects.values_list("handoff_id", "verdict"))
    assert verdicts == {waiting["handoff_id"]: "WAITING_ON_APPROVAL", healthy["handoff_id"]: "HEALTHY"}
    assert MiddlewareReport.objects.get().detail == {"tool": "place_order", "attempts": 3}


def test_the_same_body_twice_stores_each_receipt_once(client, contracts, billing):
    sent = a_bundle("healthy")
    post(client, billing, sent)

    again = post(client, billing, sent)

    assert again.status_code == 200
    assert again.json() == {"entries": [{"stored": False}] * 5}
    assert Receipt.objects.count() == 5


def test_a_bundle_whose_wait_was_decided_since_stores_the_new_wait(client, contracts, billing):
    sent = a_bundle("waiting")
    post(client, billing, sent)
    decided = {**sent, "wait": {**sent["wait"], "resolved": True, "resolution": "approved"}}

    response = post(client, billing, decided)

    assert [e["stored"] for e in response.json()["entries"]] == [False, False, False, True, False]
    assert Handoff.objects.get().wait_open is False


def test_a_bad_entry_is_named_and_nothing_of_the_body_is_written(client, contracts, billing):
    entries = entries_of(a_bundle("healthy"))
    entries[3]["part"] = "secret_sauce"

    response = post(client, billing, {"entries": entries})

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "entries[3].part"
    assert nothing_written()


def test_a_value_recording_refuses_is_named_with_its_entry(client, contracts, billing):
    entries = entries_of(a_bundle("healthy"))
    # A value of the wrong type (spec v1.3: an unsafe id or name is stored redacted, not refused).
    entries[1]["value"] = {**entries[1]["value"], "goto": ["/etc/passwd"]}

    response = post(client, billing, {"entries": entries})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error == {"field": "entries[1].reduced.goto", "message": "must be a string"}
    assert nothing_written()


def test_a_report_of_an_unknown_kind_is_refused_not_dropped(client, contracts, billing):
    report = {"kind": "report", "operation_id": "op-r", "agent": "a", "report": "gossip", "detail": {}}

    response = post(client, billing, {"entries": [report]})

    assert (response.status_code, response.json()["error"]["field"]) == (400, "entries[0].report")
    assert nothing_written()


def test_a_bad_bundle_in_a_list_is_named_by_its_index(client, contracts, billing):
    bad = {**a_bundle(), "final_status": "done-ish"}

    response = post(client, billing, [a_bundle(), bad])

    assert (response.status_code, response.json()["error"]["field"]) == (400, "[1].final_status")
    assert nothing_written()


@pytest.mark.parametrize(
    ("content_type", "raw", "status", "field"),
    [
        ("text/plain", b"{}", 415, "Content-Type"),
        ("application/x-www-form-urlencoded", b"a=1", 415, "Content-Type"),
        ("application/json", b"{", 400, "body"),
        ("application/json", b'{"entries": NaN}', 400, "body"),
        ("application/json", b"\xff\xfe{}", 400, "body"),
        ("application/json", b"[" * 100_000 + b"]" * 100_000, 400, "body"),
        ("application/json", b"1" * 5000, 400, "body"),
        ("application/json", b'"just a string"', 400, "body"),
    ],
)
def test_a_body_it_cannot_read_is_refused_naming_why(client, billing, content_type, raw, status, field):
    response = post(client, billing, None, content_type=content_type, raw=raw)

    assert (response.status_code, response.json()["error"]["field"]) == (status, field)
    assert nothing_written()


def test_a_body_over_the_size_cap_is_refused(client, billing, settings):
    settings.SIDEWISP_API_MAX_BODY_BYTES = 2048

    response = post(client, billing, {"entries": [], "padding": "x" * 4096})

    assert response.status_code == 413
    assert response.json()["error"] == {"field": "body", "message": "must be at most 2048 bytes"}


def test_a_run_created_by_receipts_is_running_until_the_app_says_otherwise(client, contracts, billing):
    sent = a_bundle("healthy")
    entries = entries_of(sent)

    post(client, billing, {"entries": entries[:3]})
    running = Run.objects.get().status
    post(client, billing, {"entries": entries[3:]})

    assert (running, Run.objects.get().status) == (Run.Status.RUNNING, Run.Status.COMPLETE)


def test_it_answers_503_while_the_rate_limiter_is_unreachable(client, contracts, billing, settings):
    dead = {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:9/0"}
    settings.CACHES = {"default": {**dead, "OPTIONS": {"socket_connect_timeout": 0.5}}}

    response = post(client, billing, a_bundle())

    assert (response.status_code, response["Retry-After"]) == (503, "5")
    assert nothing_written()


def test_a_get_is_not_allowed(client, billing):
    assert client.get(RECEIPTS, headers={"Authorization": f"Bearer {billing}"}).status_code == 405


def test_a_token_past_its_rate_limit_is_told_when_to_come_back(client, billing, token_for, settings):
    settings.SIDEWISP_API_RATE_LIMIT = 2

    answers = [post(client, billing, {"entries": []}).status_code for _ in range(3)]
    limited = post(client, billing, {"entries": []})

    assert answers == [200, 200, 429]
    assert 1 <= int(limited["Retry-After"]) <= settings.SIDEWISP_API_RATE_WINDOW
    assert post(client, token_for("other"), {"entries": []}).status_code == 200


# --- fuzzing: never a 500, nothing half-written ------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)
KEYS = st.sampled_from(["entries", "schema", "kind", "part", "value", "operation_id", "handoff_id", "attempt"])
ENTRYISH = st.dictionaries(KEYS | st.sampled_from(list(bundle.PARTS)), JSON, max_size=7)
FIELDS = st.sampled_from(["sender", "receiver", "route_version", "goto", "node_id", "owner", "deadline_utc", "result"])
# Entries that pass the shape check, so the fuzzing reaches the recording's own validation.
NEAR_VALID = st.fixed_dictionaries(
    {
        "kind": st.just("part"),
        "operation_id": st.sampled_from(["op-f1", "op-f2"]),
        "handoff_id": st.sampled_from(["h-f1", "h-f2", None]),
        "part": st.sampled_from([*bundle.PARTS, "final_status"]),
        "value": st.dictionaries(FIELDS, JSON, max_size=4) | JSON,
        "attempt": st.sampled_from(["1", "2"]),
    }
)
FUZZ = hypothesis_settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(
    body=JSON
    | st.fixed_dictionaries({"entries": st.lists(ENTRYISH | NEAR_VALID, max_size=4)})
    | st.lists(ENTRYISH, max_size=3)
)
def test_fuzzed_json_never_fails_and_writes_nothing_unless_accepted(client, contracts, billing, settings, body):
    settings.SIDEWISP_API_RATE_LIMIT = 10_000
    counts = lambda: (Run.objects.count(), Receipt.objects.count(), MiddlewareReport.objects.count())  # noqa: E731
    before = counts()

    response = post(client, billing, body)

    assert response.status_code in (200, 400, 403)
    assert "error" in response.json() or response.status_code == 200
    if response.status_code != 200:
        assert counts() == before


@FUZZ
@given(raw=st.binary(max_size=300), content_type=st.sampled_from(["application/json", "text/json", "", "a/b; x"]))
def test_fuzzed_bytes_never_fail_the_server(client, billing, settings, raw, content_type):
    settings.SIDEWISP_API_RATE_LIMIT = 10_000

    response = post(client, billing, None, content_type=content_type, raw=raw)

    assert response.status_code in (200, 400, 415)
    assert not Receipt.objects.exists()


@FUZZ
@given(authorization=st.text(alphabet=st.characters(max_codepoint=255), max_size=120))
def test_a_fuzzed_authorization_header_is_a_401_never_a_500(client, authorization):
    headers = {"Authorization": authorization}

    response = client.post(RECEIPTS, data="{}", content_type="application/json", headers=headers)

    assert response.status_code == 401


# --- remote decisions ------------------------------------------------------------------


@pytest.fixture
def remote_wait(client, contracts, billing, person):
    """A valid wait on a run the billing source created, and an admin who may decide any wait."""
    sent = a_bundle("waiting")
    assert post(client, billing, sent).status_code == 200
    return Handoff.objects.get(handoff_id=sent["handoff_id"]), person("boss", "admin")


def get_decision(client, token: str, operation_id: str):
    url = reverse("api:decision", args=[operation_id])
    return client.get(url, headers={"Authorization": f"Bearer {token}"})


def claim(client, token: str, operation_id: str, decision_id: object):
    url = reverse("api:decision-claim", args=[operation_id])
    body = json.dumps({"decision": decision_id})
    return client.post(url, body, content_type="application/json", headers={"Authorization": f"Bearer {token}"})


def decide(client, handoff: Handoff, user, **fields) -> None:
    client.force_login(user)
    data = {"decision": "approve", "token": handoff.wait_part["resume_token_id"], "key": uuid.uuid4().hex, **fields}
    assert client.post(reverse("sidewisp:wait-decide", args=[handoff.pk]), data, follow=True).status_code == 200
    client.logout()


def test_a_decision_made_on_the_dashboard_is_offered_and_claimed_once(client, billing, remote_wait):
    handoff, boss = remote_wait
    operation_id = handoff.run.operation_id
    assert get_decision(client, billing, operation_id).json()["decision"] is None

    decide(client, handoff, boss, decision="reject", reason="over budget")
    offered = get_decision(client, billing, operation_id).json()["decision"]
    first = claim(client, billing, operation_id, offered["id"])
    second = claim(client, billing, operation_id, offered["id"])

    assert offered["type"] == "reject"
    assert first.status_code == 200
    assert first.json()["decision"]["resume"] == {"type": "reject", "message": "over budget"}
    assert second.status_code == 409
    assert get_decision(client, billing, operation_id).json()["decision"] is None
    handoff.refresh_from_db()
    assert (handoff.wait_open, handoff.wait_part["resolution"], handoff.run.status) == (False, "rejected", "running")
    entry = AuditEntry.objects.get(action="wait.resume")
    assert (entry.run, entry.actor_name) == (handoff.run, "system")
    assert entry.detail["resumed_by"] == "remote app" and entry.detail["source"] == "billing"


def test_another_source_may_not_see_or_claim_a_runs_decision(client, token_for, remote_wait):
    handoff, boss = remote_wait
    decide(client, handoff, boss)
    decision_id = handoff.decisions.get().pk
    shipping = token_for("shipping")

    # issue 29 §4: to another source the run's id names no run of its own, answered as an unknown id is.
    assert get_decision(client, shipping, handoff.run.operation_id).status_code == 404
    assert claim(client, shipping, handoff.run.operation_id, decision_id).status_code == 404
    assert get_decision(client, shipping, "op-nobody").status_code == 404
    assert get_decision(client, "swt_nonsense", handoff.run.operation_id).status_code == 401
    assert handoff.decisions.get().applied_at is None


def test_a_claim_must_name_a_decision_of_the_run(client, billing, remote_wait):
    handoff, _ = remote_wait

    assert claim(client, billing, handoff.run.operation_id, "1").status_code == 400
    assert claim(client, billing, handoff.run.operation_id, 999_999).status_code == 404


@FUZZ
@given(body=JSON)
def test_a_fuzzed_claim_is_refused_naming_why_never_a_500(client, billing, remote_wait, settings, body):
    settings.SIDEWISP_API_RATE_LIMIT = 10_000
    handoff, _ = remote_wait

    response = claim(client, billing, handoff.run.operation_id, body)

    assert response.status_code in (400, 404)
    assert response.json()["error"]["field"] in ("decision", "body")  # body: Infinity is not JSON
    assert not AuditEntry.objects.filter(action="wait.resume").exists()


# --- the admin -------------------------------------------------------------------------


def test_the_admin_shows_a_new_token_once_and_it_works(client, admin_user, contracts):
    client.force_login(admin_user)

    page = client.post(reverse("admin:receipts_sourcetoken_add"), {"source_name": "billing", "note": "prod"})

    raw = page.context["raw_token"]
    assert page.status_code == 200 and raw in page.content.decode()
    assert "no-store" in page["Cache-Control"]
    listing = client.get(reverse("admin:receipts_sourcetoken_changelist")).content.decode()
    assert "billing" in listing and raw not in listing
    assert post(client, raw, a_bundle()).status_code == 200


def test_the_admin_role_makes_tokens_and_an_operator_may_not(client, person):
    admin, operator = person("alex", "admin", is_staff=True), person("oona", "operator", is_staff=True)
    add = reverse("admin:receipts_sourcetoken_add")

    client.force_login(operator)
    assert client.post(add, {"source_name": "billing"}).status_code == 403
    client.force_login(admin)
    assert client.post(add, {"source_name": "billing"}).status_code == 200

    assert list(SourceToken.objects.values_list("source_name", "created_by__username")) == [("billing", "alex")]


def test_the_admin_refuses_a_source_name_that_is_not_a_name(client, admin_user):
    client.force_login(admin_user)

    page = client.post(reverse("admin:receipts_sourcetoken_add"), {"source_name": "/srv/app"})

    assert "must not contain an absolute local path" in page.content.decode()
    assert not SourceToken.objects.exists()


def test_revoking_in_the_admin_stops_the_token_and_is_audited(client, admin_user, billing):
    client.force_login(admin_user)
    token = SourceToken.objects.get()

    client.post(
        reverse("admin:receipts_sourcetoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )

    assert post(client, billing, {"entries": []}).status_code == 401
    page = client.get(reverse("admin:receipts_sourcetoken_change", args=[token.pk]))
    assert page.status_code == 200 and token.digest not in page.content.decode()
    entry = AuditEntry.objects.get(action="source_token.revoke")
    assert (entry.actor_name, entry.outcome) == ("admin", "done")
