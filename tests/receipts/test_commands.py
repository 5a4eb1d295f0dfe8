from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agents.demo.contracts import team_contracts
from receipts.ingest.recording import record
from receipts.models import ContractVersion, Handoff, WaitReason
from tests.factories import healthy_parts

SHARED_CASES = Path(django_settings.BASE_DIR).parent / "shared" / "spec" / "cases"


def _replay(*args: str) -> tuple[list[str], int]:
    out = StringIO()
    try:
        call_command("replay_receipts", *args, stdout=out)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return out.getvalue().splitlines(), code


def _write(path: Path, lines: list[object]) -> Path:
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def _bundle(handoff_id: str, **extra) -> dict:
    return {
        "schema": "sidewisp.handoff/1",
        "handoff_id": handoff_id,
        "operation_id": f"op-{handoff_id}",
        **healthy_parts(),
        "final_status": "complete",
        **extra,
    }


@pytest.fixture
def no_contracts(db) -> None:
    """Start from empty contract tables (a fresh database has the demo team's)."""
    ContractVersion.objects.all().delete()
    WaitReason.objects.all().delete()


@pytest.fixture
def contracts_file(tmp_path) -> Path:
    path = tmp_path / "contracts.json"
    path.write_text(json.dumps(team_contracts()))
    return path


@pytest.mark.skipif(not SHARED_CASES.exists(), reason="shared/spec/cases is not beside the checkout")
def test_the_eight_public_cases_replay_as_expected():
    lines, code = _replay(
        str(SHARED_CASES / "public.jsonl"),
        "--contracts",
        str(SHARED_CASES / "contracts.json"),
        "--now",
        "2026-07-30T12:00:00Z",
    )
    assert lines[-1] == "8 cases, 8 as expected, 0 not"
    assert code == 0
    rows = [json.loads(line) for line in lines[:-1]]
    assert [row["verdict"] for row in rows] == [row["expected"] for row in rows]
    assert set(rows[0]) == {"handoff_id", "verdict", "boundary", "next_move", "expected"}


def test_it_exits_1_when_a_case_is_not_as_expected(tmp_path, contracts_file):
    cases = _write(
        tmp_path / "cases.jsonl", [_bundle("ok", expect="HEALTHY"), _bundle("wrong", expect="FALSE_COMPLETE")]
    )
    lines, code = _replay(str(cases), "--contracts", str(contracts_file), "--now", "2026-07-30T12:00:00Z")
    assert lines[-1] == "2 cases, 1 as expected, 1 not"
    assert code == 1


def test_it_exits_2_naming_the_file_line_and_field_of_a_bad_bundle(tmp_path, contracts_file):
    bad = _bundle("bad")
    bad["wait"] = {"deadline_utc": "tomorrow"}
    cases = _write(tmp_path / "cases.jsonl", [_bundle("ok"), bad])
    with pytest.raises(CommandError) as excinfo:
        call_command("replay_receipts", str(cases), "--contracts", str(contracts_file), stdout=StringIO())
    assert excinfo.value.returncode == 2
    assert str(excinfo.value).startswith("cases.jsonl:2: wait.deadline_utc:")


def test_it_exits_2_on_a_line_that_is_not_json(tmp_path, contracts_file):
    cases = _write(tmp_path / "cases.jsonl", ["{not json"])
    with pytest.raises(CommandError) as excinfo:
        call_command("replay_receipts", str(cases), "--contracts", str(contracts_file), stdout=StringIO())
    assert excinfo.value.returncode == 2
    assert "cases.jsonl:1: not valid JSON" in str(excinfo.value)


def test_it_exits_2_on_unreadable_contracts_or_now(tmp_path, contracts_file):
    cases = _write(tmp_path / "cases.jsonl", [_bundle("ok")])
    with pytest.raises(CommandError) as missing:
        call_command("replay_receipts", str(cases), "--contracts", str(tmp_path / "nope.json"), stdout=StringIO())
    with pytest.raises(CommandError) as bad_now:
        call_command("replay_receipts", str(cases), "--contracts", str(contracts_file), "--now", "noon")
    assert (missing.value.returncode, bad_now.value.returncode) == (2, 2)
    assert "nope.json: cannot read" in str(missing.value)
    assert "--now" in str(bad_now.value)


def test_a_wait_is_judged_against_the_given_now(tmp_path, contracts_file):
    waiting = _bundle(
        "w",
        final_status="waiting",
        wait={
            "owner": "ops-lead",
            "reason": "purchase_approval",
            "deadline_utc": "2026-07-31T10:00:00Z",
            "resume_token_id": "rt-1",
            "state_persisted": True,
            "resolved": False,
        },
    )
    cases = _write(tmp_path / "cases.jsonl", [waiting])
    before, _ = _replay(str(cases), "--contracts", str(contracts_file), "--now", "2026-07-30T12:00:00Z")
    after, _ = _replay(str(cases), "--contracts", str(contracts_file), "--now", "2026-08-01T12:00:00Z")
    assert json.loads(before[0])["verdict"] == "WAITING_ON_APPROVAL"
    assert json.loads(after[0])["verdict"] == "UNCERTAIN"


@pytest.mark.django_db
def test_exported_receipts_replay_to_the_stored_verdicts(tmp_path, contracts, contracts_file):
    for part, value in healthy_parts().items():
        record(handoff_id="h-ok", operation_id="op-1", part=part, value=value)
    record(handoff_id="h-ok", operation_id="op-1", part="final_status", value="complete")
    record(handoff_id="h-stale", operation_id="op-1", part="created", value=healthy_parts()["created"])
    out = StringIO()
    call_command("export_receipts", stdout=out)
    exported = _write(tmp_path / "export.jsonl", out.getvalue().splitlines())
    lines, code = _replay(str(exported), "--contracts", str(contracts_file))
    verdicts = {json.loads(line)["handoff_id"]: json.loads(line)["verdict"] for line in lines[:-1]}
    assert verdicts == {"h-ok": "HEALTHY", "h-stale": "STALE_CONTROL"}
    assert lines[-1] == "2 cases, 0 as expected, 0 not"
    assert code == 0


def test_contracts_round_trip_through_import_and_export(no_contracts, contracts_file):
    call_command("import_contracts", str(contracts_file), stdout=StringIO())
    out = StringIO()
    call_command("export_contracts", stdout=out)
    document = team_contracts()
    assert json.loads(out.getvalue()) == {**document, "wait_reasons": sorted(document["wait_reasons"])}


@pytest.mark.django_db
def test_importing_a_change_to_a_referenced_version_is_refused_and_changes_nothing(tmp_path, contracts):
    record(handoff_id="h-1", operation_id="op-1", part="created", value=healthy_parts()["created"])
    changed = json.loads(json.dumps(team_contracts()))
    changed["routes"]["routes/1"]["triage"]["sales"].append("region")
    changed["routes"]["routes/new"] = changed["routes"]["routes/1"]
    changed["wait_reasons"] = ["purchase_approval"]
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(changed))
    with pytest.raises(CommandError) as excinfo:
        call_command("import_contracts", str(path), stdout=StringIO())
    assert "routes.routes/1: is referenced by handoffs" in str(excinfo.value)
    assert sorted(ContractVersion.objects.values_list("version", flat=True)) == sorted(team_contracts()["routes"])
    assert ContractVersion.objects.get(version="routes/1").routes == team_contracts()["routes"]["routes/1"]
    assert WaitReason.objects.count() == len(team_contracts()["wait_reasons"])


def test_importing_an_invalid_document_names_the_field(no_contracts, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"wait_reasons": "purchase_approval", "routes": {}}))
    with pytest.raises(CommandError) as excinfo:
        call_command("import_contracts", str(path), stdout=StringIO())
    assert "bad.json: wait_reasons" in str(excinfo.value)
    assert ContractVersion.objects.count() == 0


# --- bad input is refused cleanly: exit 2 naming the file and line, never a traceback ---

HOSTILE_LINES = {
    "nested too deeply": b"[" * 100_000 + b"]" * 100_000,
    "a number is too long": b'{"n": ' + b"9" * 5_000 + b"}",
    "not UTF-8 text": b'{"schema": "\xff\xfe"}',
}


@pytest.mark.parametrize("problem", sorted(HOSTILE_LINES))
def test_replay_refuses_hostile_input_with_exit_2_naming_the_problem(tmp_path, contracts_file, problem):
    cases = tmp_path / "cases.jsonl"
    cases.write_bytes(json.dumps(_bundle("ok")).encode() + b"\n" + HOSTILE_LINES[problem] + b"\n")
    with pytest.raises(CommandError) as excinfo:
        call_command("replay_receipts", str(cases), "--contracts", str(contracts_file), stdout=StringIO())
    assert excinfo.value.returncode == 2
    assert str(excinfo.value).startswith("cases.jsonl")
    assert problem in str(excinfo.value)


@pytest.mark.parametrize("problem", sorted(HOSTILE_LINES))
def test_import_contracts_refuses_hostile_input_with_exit_2(no_contracts, tmp_path, problem):
    path = tmp_path / "contracts.json"
    path.write_bytes(HOSTILE_LINES[problem])
    with pytest.raises(CommandError) as excinfo:
        call_command("import_contracts", str(path), stdout=StringIO())
    assert excinfo.value.returncode == 2
    assert problem in str(excinfo.value)
    assert not ContractVersion.objects.exists()


def test_a_line_holding_a_unicode_line_separator_is_one_case(tmp_path, contracts_file):
    case = _bundle("ok", note="one\u2028line")
    cases = tmp_path / "cases.jsonl"
    cases.write_text(json.dumps(case, ensure_ascii=False) + "\n", encoding="utf-8")
    lines, code = _replay(str(cases), "--contracts", str(contracts_file))
    assert (lines[-1], code) == ("1 cases, 0 as expected, 0 not", 0)


@given(payload=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_replay_never_raises_anything_but_a_clean_exit_on_any_bytes(tmp_path, contracts_file, payload):
    cases = tmp_path / "fuzz.jsonl"
    cases.write_bytes(payload)
    try:
        call_command("replay_receipts", str(cases), "--contracts", str(contracts_file), stdout=StringIO())
    except CommandError as exc:
        assert exc.returncode == 2
    except SystemExit as exc:
        assert exc.code == 1


@given(payload=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_import_contracts_answers_any_bytes_with_an_import_or_exit_2(no_contracts, tmp_path, payload):
    path = tmp_path / "fuzz.json"
    path.write_bytes(payload)
    try:
        call_command("import_contracts", str(path), stdout=StringIO())
    except CommandError as exc:
        assert exc.returncode == 2


def test_importing_a_file_without_wait_reasons_says_what_the_key_needs(no_contracts, tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"routes": team_contracts()["routes"]}))
    with pytest.raises(CommandError) as excinfo:
        call_command("import_contracts", str(path), stdout=StringIO())
    message = str(excinfo.value)
    assert message.startswith('old.json: the key "wait_reasons" is missing')
    assert '{"wait_reasons": ["purchase_approval"], "routes": {...}}' in message
    assert '"wait_reasons": [] when the team has none' in message
    assert excinfo.value.returncode == 2
    assert ContractVersion.objects.count() == 0


# --- v1.3 the whole turn: a transfer made beside another call -------------------------------------


def _batched_turn(handoff_id: str, answered: list[str]) -> dict:
    """A public-style case: [lookup_fare, transfer] in one AI message; `answered` is what the update carried."""
    parts = healthy_parts()
    parts["created"]["turn_tool_call_ids"] = [parts["created"]["tool_call_id"], "call_lookup_fare"]
    parts["reduced"]["tool_message_ids"] = answered
    return {"schema": "sidewisp.handoff/1", "handoff_id": handoff_id, "operation_id": "op-turn", **parts}


def test_a_transfer_whose_turn_left_a_call_unanswered_replays_open_from_a_public_style_case(tmp_path, contracts_file):
    call_id = healthy_parts()["created"]["tool_call_id"]
    open_turn = {**_batched_turn("h-open", [call_id]), "final_status": "running", "expect": "OPEN_TOOL_PROTOCOL"}
    answered = {**_batched_turn("h-whole", ["call_lookup_fare", call_id]), "final_status": "running"}
    cases = _write(tmp_path / "cases.jsonl", [open_turn, {**answered, "expect": "HEALTHY"}])

    lines, code = _replay(str(cases), "--contracts", str(contracts_file))

    assert [json.loads(line)["verdict"] for line in lines[:-1]] == ["OPEN_TOOL_PROTOCOL", "HEALTHY"]
    assert json.loads(lines[0])["boundary"] == "tool_protocol"
    assert (lines[-1], code) == ("2 cases, 2 as expected, 0 not", 0)


@pytest.mark.django_db
def test_the_turns_call_ids_are_stored_exported_and_replayed_to_the_stored_verdict(tmp_path, contracts, contracts_file):
    call_id = healthy_parts()["created"]["tool_call_id"]
    for name, value in _batched_turn("h-open", [call_id]).items():
        if name in ("created", "reduced", "destination"):
            record(handoff_id="h-open", operation_id="op-turn", part=name, value=value)
    assert Handoff.objects.get(handoff_id="h-open").verdict == "OPEN_TOOL_PROTOCOL"
    out = StringIO()
    call_command("export_receipts", stdout=out)

    exported = [json.loads(line) for line in out.getvalue().splitlines()]
    assert exported[0]["created"]["turn_tool_call_ids"] == [call_id, "call_lookup_fare"]
    lines, _ = _replay(str(_write(tmp_path / "export.jsonl", exported)), "--contracts", str(contracts_file))
    assert json.loads(lines[0])["verdict"] == "OPEN_TOOL_PROTOCOL"
