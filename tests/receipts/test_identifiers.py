"""Identifiers are not secrets (spec v1.3): an id or a name of any shape is kept; only a known credential shape
is refused, and then stored as `redacted:` and a digest, its entry kept and its run told which field."""

from __future__ import annotations

import hashlib
import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from receipts.models import ContractVersion, Handoff, MiddlewareReport, Receipt, Run
from receipts.verdicts.bundle import identifier_problem, parse_bundle, text_problem
from receipts.workers import sources
from tests.factories import healthy_bundle, public_contracts

# Ids people and frameworks really use: none of them may cost a run its evidence.
IDENTIFIERS = {
    "a git SHA": "9fceb02d0ae598e95dc970b74767f19372d61af8",
    "a SHA-256": hashlib.sha256(b"checkout").hexdigest(),
    "a UUID without dashes": "3f2b8c1e9a7d4e5fb6c0a1d2e3f4a5b6",
    "a random-looking run": "Xq8Lr2ZpW9vN4mT7kB3sJ6hF1dG5cY0a",
    "a session id": "user42_Session2024_10_05_CheckoutFlow-9f8a",
    "a long name": "op-" + "SalesQualificationAgent_2024_EMEA-" * 5,
}
CREDENTIALS = {
    "an OpenAI key": "sk-proj-abcdEFGH1234ijklMNOP5678",
    "a GitHub token": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "an AWS key id": "AKIAIOSFODNN7EXAMPLE",
    "a JSON web token": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln",
    "a PEM block": "-----BEGIN PRIVATE KEY-----",
    "a bearer token": "Bearer abc.def",
}


def redaction_of(text: str) -> str:
    return "redacted:" + hashlib.sha256(text.encode()).hexdigest()[:12]


def with_ids(ident: str, **extra) -> dict:
    bundle = healthy_bundle(handoff_id=f"h-{ident}"[:200], operation_id=ident, **extra)
    bundle["created"]["tool_call_id"] = ident
    bundle["reduced"]["tool_message_ids"] = [ident]
    return bundle


# --- the rule ------------------------------------------------------------------------------


@pytest.mark.parametrize("ident", IDENTIFIERS.values(), ids=IDENTIFIERS.keys())
def test_an_identifier_of_any_shape_is_kept_as_it_is(ident: str) -> None:
    found = parse_bundle(with_ids(ident))

    assert identifier_problem(ident) is None
    assert (found.operation_id, found.created.tool_call_id, found.reduced.tool_message_ids) == (ident, ident, (ident,))


@pytest.mark.parametrize("secret", CREDENTIALS.values(), ids=CREDENTIALS.keys())
def test_a_credential_shaped_id_is_redacted_the_same_way_wherever_it_is(secret: str) -> None:
    found = parse_bundle(with_ids(secret))

    assert found.operation_id == found.created.tool_call_id == redaction_of(secret)
    assert found.reduced.tool_message_ids == (redaction_of(secret),)
    assert found.created.sender == "triage"  # the rest of the entry is kept


def test_free_text_keeps_the_stricter_rule() -> None:
    assert text_problem(IDENTIFIERS["a git SHA"]) is not None
    assert text_problem(IDENTIFIERS["a random-looking run"]) is not None


# --- the ingest API ------------------------------------------------------------------------


@pytest.fixture
def post(client, contracts):
    token = sources.issue("shop")[1]

    def _post(body: object):
        return client.post(
            "/api/v1/receipts",
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    return _post


@pytest.mark.django_db
@pytest.mark.parametrize("ident", IDENTIFIERS.values(), ids=IDENTIFIERS.keys())
def test_the_api_stores_a_run_named_by_any_identifier_healthy(post, ident: str) -> None:
    response = post(with_ids(ident))

    assert response.status_code == 200, response.content
    run = Run.objects.get(operation_id=ident)
    assert list(run.handoffs.values_list("verdict", flat=True)) == ["HEALTHY"]
    assert not run.reports.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("secret", CREDENTIALS.values(), ids=CREDENTIALS.keys())
def test_the_api_keeps_an_entry_with_a_credential_shaped_id_redacted_and_says_which_field(post, secret: str) -> None:
    response = post(with_ids(secret))

    assert response.status_code == 200, response.content
    run = Run.objects.get(operation_id=redaction_of(secret))
    assert list(run.handoffs.values_list("verdict", flat=True)) == ["HEALTHY"]
    named = {
        (r["part"], r["field"]) for r in run.reports.filter(kind="value_redacted").values_list("detail", flat=True)
    }
    assert {("run", "operation_id"), ("handoff", "handoff_id"), ("created", "created.tool_call_id")} <= named
    assert ("reduced", "reduced.tool_message_ids[0]") in named
    stored = json.dumps(
        [
            list(Receipt.objects.values_list("payload", "attempt")),
            list(Run.objects.values_list("operation_id", "thread_id")),
            list(Handoff.objects.values_list("handoff_id", flat=True)),
            list(MiddlewareReport.objects.values_list("agent", "detail", "attempt")),
        ]
    )
    assert secret not in stored


@pytest.mark.django_db
def test_the_same_credential_posted_again_finds_the_same_run(post) -> None:
    secret = CREDENTIALS["a GitHub token"]
    post(with_ids(secret))
    later = with_ids(secret)
    later["handoff_id"] = "h-later"
    later["created"]["tool_call_id"] = later["reduced"]["tool_message_ids"][0] = "call_later"

    assert post(later).status_code == 200
    assert Run.objects.count() == 1
    assert Run.objects.get().handoffs.count() == 2


@pytest.mark.django_db
def test_the_api_still_refuses_an_id_that_is_not_a_string_naming_the_field(post) -> None:
    response = post(healthy_bundle(operation_id=["op-1"]))

    assert response.status_code == 400
    assert response.json()["error"]["field"] == "operation_id"
    assert not Run.objects.exists()


# --- replay_receipts and contracts -----------------------------------------------------------


def _replay(tmp_path: Path, bundles: list[dict]) -> tuple[list[dict], str, int]:
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(json.dumps(b) for b in bundles) + "\n")
    rules = tmp_path / "contracts.json"
    rules.write_text(json.dumps(public_contracts()))
    out = StringIO()
    try:
        call_command(
            "replay_receipts", str(cases), "--contracts", str(rules), "--now", "2026-07-30T12:00:00Z", stdout=out
        )
        code = 0
    except SystemExit as exc:
        code = exc.code
    lines = out.getvalue().splitlines()
    return [json.loads(line) for line in lines[:-1]], lines[-1], code


def test_replay_classifies_handoffs_named_by_any_identifier(tmp_path) -> None:
    bundles = [{**with_ids(ident), "handoff_id": ident, "expect": "HEALTHY"} for ident in IDENTIFIERS.values()]

    rows, summary, code = _replay(tmp_path, bundles)

    assert code == 0
    assert [(row["handoff_id"], row["verdict"]) for row in rows] == [(i, "HEALTHY") for i in IDENTIFIERS.values()]
    assert summary == f"{len(IDENTIFIERS)} cases, {len(IDENTIFIERS)} as expected, 0 not"


def test_replay_prints_a_credential_shaped_handoff_id_redacted(tmp_path) -> None:
    secret = CREDENTIALS["an AWS key id"]

    rows, _, code = _replay(tmp_path, [{**with_ids(secret), "handoff_id": secret, "expect": "HEALTHY"}])

    assert code == 0
    assert rows[0]["handoff_id"] == redaction_of(secret)


def _contracts_with_agent(tmp_path: Path, agent: str) -> Path:
    document = {"wait_reasons": [], "routes": {"emea/1": {"triage": {agent: ["request_type"]}}}}
    path = tmp_path / "contracts.json"
    path.write_text(json.dumps(document))
    return path


@pytest.mark.django_db
def test_a_contract_naming_an_agent_like_a_session_id_imports(tmp_path) -> None:
    call_command("import_contracts", str(_contracts_with_agent(tmp_path, "SalesQualificationAgent_2024_EMEA")))

    assert ContractVersion.objects.get(version="emea/1").routes == {
        "triage": {"SalesQualificationAgent_2024_EMEA": ["request_type"]}
    }


@pytest.mark.django_db
def test_a_contract_naming_an_agent_by_a_credential_is_refused_without_repeating_it(tmp_path) -> None:
    secret = CREDENTIALS["an OpenAI key"]

    with pytest.raises(CommandError) as refused:
        call_command("import_contracts", str(_contracts_with_agent(tmp_path, secret)))

    assert "routes.emea/1.triage: has a receiver name that must not contain a credential" in str(refused.value)
    assert secret not in str(refused.value)
    assert not ContractVersion.objects.filter(version="emea/1").exists()


@pytest.mark.django_db
def test_the_run_page_names_the_redacted_fields_and_never_the_value(post, admin_client) -> None:
    secret = CREDENTIALS["a JSON web token"]
    post(with_ids(secret))
    run = Run.objects.get(operation_id=redaction_of(secret))

    page = admin_client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode()

    assert "Value redacted" in page
    assert "The run&#x27;s operation_id held a value that may not be stored as it is" in page
    assert "The created.tool_call_id field of the created receipt held a value" in page
    assert secret not in page


_HIDDEN = "redacted:0123456789ab"


@pytest.mark.parametrize(
    ("value", "paths"),
    [
        (_HIDDEN, ["f"]),
        ("redacted:not-a-replacement", []),
        ({"a": 1, "b": None, "c": True, "d": 2.5, "e": "x"}, []),
        ({"a": [1, "x", {"b": ("y", _HIDDEN)}], "c": _HIDDEN}, ["f.a[2].b[1]", "f.c"]),
        ([None, [[_HIDDEN]], {"k": {"j": "redacted:"}}], ["f[1][0][0]"]),
        ({"redacted:0123456789ab": "key, not a value"}, []),
    ],
)
def test_redacted_fields_names_every_redacted_value_at_any_depth(value, paths) -> None:
    from sidewisp_agent.fields import redacted_fields

    assert redacted_fields(value, "f") == paths


def test_a_value_without_a_redacted_prefix_is_not_walked_for_paths(monkeypatch) -> None:
    """Issue 32 §2: nearly every stored part holds no redacted value; it is answered without building paths."""
    from sidewisp_agent import fields

    from tests.factories import healthy_parts

    monkeypatch.setattr(fields, "is_redacted", lambda *args: pytest.fail("walked for paths"))
    for name, value in healthy_parts().items():
        assert fields.redacted_fields(value, name) == []
