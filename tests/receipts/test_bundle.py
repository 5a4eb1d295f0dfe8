from __future__ import annotations

import copy
import hashlib
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from receipts.verdicts.bundle import (
    PARTS,
    SCHEMA,
    Bundle,
    BundleError,
    Contracts,
    Created,
    Reduced,
    Verification,
    Wait,
    bundle_to_dict,
    contracts_to_dict,
    parse_bundle,
    parse_contracts,
    parse_final_status,
    parse_part,
    parse_time,
    part_to_dict,
)
from tests.factories import healthy_bundle, healthy_parts

CANARY = "CANARY-SECRET-9f2c"


def spec_example() -> dict:
    """The full bundle from spec §1, every part present."""
    bundle = healthy_bundle("h-7f3a", operation_id="op-91c2", expect="HEALTHY")
    bundle["wait"] = {
        "owner": "ops-lead",
        "reason": "purchase_approval",
        "deadline_utc": "2026-07-31T10:00:00Z",
        "resume_token_id": "rt-55d0",
        "state_persisted": True,
        "resolved": False,
    }
    bundle["verification"]["receipt_id"] = "v-19"
    return bundle


def with_field(part: str, field: str, value: object) -> dict:
    data = spec_example()
    data[part][field] = value
    return data


def error_for(value: object) -> BundleError:
    with pytest.raises(BundleError) as caught:
        parse_bundle(value)
    return caught.value


def contracts_document() -> dict:
    return {
        "wait_reasons": ["purchase_approval", "secret_disclosure"],
        "routes": {
            "routes/1": {
                "triage": {"sales": ["request_type", "customer_tier"], "support": []},
                "sales": {"billing": ["order_id"]},
            }
        },
    }


def contracts_error_for(value: object) -> BundleError:
    with pytest.raises(BundleError) as caught:
        parse_contracts(value)
    return caught.value


# --- the happy path ---------------------------------------------------------


def test_it_parses_the_spec_example_into_typed_parts() -> None:
    bundle = parse_bundle(spec_example())

    assert bundle.handoff_id == "h-7f3a"
    assert bundle.operation_id == "op-91c2"
    assert bundle.expect == "HEALTHY"
    assert bundle.final_status == "complete"
    assert bundle.created == Created(
        sender="triage",
        receiver="sales",
        route_version="routes/1",
        tool_call_id="call_abc",
        required_context_keys=("request_type", "customer_tier", "consent_status"),
        at=datetime(2026, 7, 30, 10, 0, tzinfo=UTC),
    )
    assert bundle.reduced is not None
    assert bundle.reduced.tool_message_ids == ("call_abc",)
    assert bundle.wait == Wait(
        owner="ops-lead",
        reason="purchase_approval",
        deadline_utc=datetime(2026, 7, 31, 10, 0, tzinfo=UTC),
        resume_token_id="rt-55d0",
        state_persisted=True,
        resolved=False,
    )
    assert bundle.verification == Verification(
        verifier="order_exists",
        result="pass",
        checked_at=datetime(2026, 7, 30, 10, 5, tzinfo=UTC),
        receipt_id="v-19",
    )


def test_it_serializes_the_spec_example_back_to_the_same_object() -> None:
    assert bundle_to_dict(parse_bundle(spec_example())) == spec_example()


def test_it_normalizes_a_time_with_an_offset_to_utc() -> None:
    bundle = parse_bundle(with_field("created", "at", "2026-07-30T12:00:00+02:00"))

    assert bundle.created is not None
    assert bundle.created.at == datetime(2026, 7, 30, 10, 0, tzinfo=UTC)
    assert bundle.created.at.utcoffset() is not None
    assert bundle_to_dict(bundle)["created"]["at"] == "2026-07-30T10:00:00Z"


def test_it_keeps_fractional_seconds_when_serializing_a_time() -> None:
    bundle = parse_bundle(with_field("created", "at", "2026-07-30T10:00:00.250-01:30"))

    assert bundle_to_dict(bundle)["created"]["at"] == "2026-07-30T11:30:00.250000Z"


@pytest.mark.parametrize("text", ["2026-07-30T10:00:00Z", "2026-07-30T10:00:00+00:00", "2026-07-30 10:00:00Z"])
def test_it_accepts_a_time_with_a_zone(text: str) -> None:
    assert parse_time("t", text) == datetime(2026, 7, 30, 10, 0, tzinfo=UTC)


def test_it_treats_absent_and_null_parts_as_no_evidence() -> None:
    data = spec_example()
    del data["created"]
    data["reduced"] = None

    bundle = parse_bundle(data)

    assert bundle.created is None
    assert bundle.reduced is None
    assert "created" not in bundle_to_dict(bundle)
    assert "reduced" not in bundle_to_dict(bundle)


def test_it_treats_missing_and_null_fields_inside_a_part_as_missing_evidence() -> None:
    bundle = parse_bundle({**spec_example(), "reduced": {"goto": None}, "wait": {}})

    assert bundle.reduced == Reduced()
    assert bundle.reduced.tool_message_ids == ()
    assert bundle.wait == Wait()


def test_it_keeps_an_empty_string_as_an_empty_string() -> None:
    bundle = parse_bundle(with_field("created", "tool_call_id", ""))

    assert bundle.created is not None
    assert bundle.created.tool_call_id == ""


def test_it_allows_final_status_and_expect_to_be_absent_or_null() -> None:
    data = spec_example()
    del data["expect"]
    data["final_status"] = None

    bundle = parse_bundle(data)

    assert bundle.final_status is None
    assert bundle.expect is None
    assert "expect" not in bundle_to_dict(bundle)
    assert bundle_to_dict(bundle)["final_status"] is None


def test_it_accepts_a_relative_route_version_with_a_slash() -> None:
    assert parse_bundle(spec_example()).created.route_version == "routes/1"


def test_it_accepts_strings_and_lists_exactly_at_the_caps() -> None:
    data = with_field("created", "sender", "s" * 200)
    data["reduced"]["context_keys"] = [f"k{i}" for i in range(100)]

    bundle = parse_bundle(data)

    assert bundle.created.sender == "s" * 200
    assert len(bundle.reduced.context_keys) == 100


# --- parts on their own -----------------------------------------------------


def test_it_parses_one_part_on_its_own() -> None:
    part = parse_part("destination", {"node_id": "sales", "started_at": "2026-07-30T10:00:02Z"})

    assert part_to_dict(part) == {"node_id": "sales", "started_at": "2026-07-30T10:00:02Z", "attempt_id": None}


@pytest.mark.parametrize("name", ["created", "reduced", "destination", "wait", "verification"])
def test_a_stored_part_parses_back_to_the_part_it_was_minimized_from(name) -> None:
    # receipts.ingest.setwise classifies with the part it minimized, the row path with the stored value parsed.
    raw = {**spec_example()[name], "at": "2026-07-30T12:00:00.1234567+02:00", "tools": ["search"], "extra": 1}
    part = parse_part(name, raw)

    assert parse_part(name, part_to_dict(part)) == part


def test_it_keeps_the_ids_of_the_transfers_whole_turn_and_serializes_them_back() -> None:
    data = spec_example()
    data["created"]["turn_tool_call_ids"] = ["call_abc", "call_lookup"]

    parsed = parse_bundle(data)

    assert parsed.created.turn_tool_call_ids == ("call_abc", "call_lookup")
    assert bundle_to_dict(parsed)["created"]["turn_tool_call_ids"] == ["call_abc", "call_lookup"]


def test_an_older_created_receipt_without_the_turns_ids_stays_valid_and_says_nothing_of_them() -> None:
    parsed = parse_bundle(spec_example())

    assert parsed.created.turn_tool_call_ids is None
    assert "turn_tool_call_ids" not in bundle_to_dict(parsed)["created"]


def test_it_names_a_part_field_under_the_given_prefix() -> None:
    with pytest.raises(BundleError) as caught:
        parse_part("wait", {"resolved": "yes"}, field_prefix="receipt")

    assert caught.value.field == "receipt.resolved"


@pytest.mark.parametrize(("prefix", "field"), [(None, "wait.resolved"), ("", "resolved"), ("wait", "wait.resolved")])
def test_it_names_a_part_field_under_its_own_name_by_default_and_alone_under_an_empty_prefix(prefix, field) -> None:
    with pytest.raises(BundleError) as caught:
        parse_part("wait", {"owner": "ops", "resolved": "yes"}, field_prefix=prefix)

    assert caught.value.field == field


def test_a_part_parses_the_same_under_any_prefix() -> None:
    for name, value in healthy_parts().items():
        assert (
            parse_part(name, value)
            == parse_part(name, value, field_prefix="")
            == parse_part(name, value, field_prefix="x")
        )


def test_it_names_a_part_that_is_not_an_object_under_the_given_prefix() -> None:
    with pytest.raises(BundleError) as caught:
        parse_part("wait", [], field_prefix="receipt")

    assert str(caught.value) == "receipt: must be an object"


def test_it_rejects_an_unknown_part_name_without_echoing_it() -> None:
    with pytest.raises(BundleError) as caught:
        parse_part(CANARY, {})

    assert caught.value.field == "part"
    assert CANARY not in str(caught.value)


@pytest.mark.parametrize("value", ["running", "waiting", "complete", "failed", None])
def test_it_accepts_each_final_status(value: str | None) -> None:
    assert parse_final_status(value) == value


@pytest.mark.parametrize("value", ["done", "COMPLETE", "", 1, True, ["complete"]])
def test_it_rejects_an_unknown_final_status(value: object) -> None:
    with pytest.raises(BundleError) as caught:
        parse_final_status(value)

    assert str(caught.value) == "final_status: must be one of running, waiting, complete, failed"


# --- the top level ----------------------------------------------------------


@pytest.mark.parametrize("value", [None, [], "bundle", 1, True])
def test_it_rejects_a_top_level_that_is_not_an_object(value: object) -> None:
    assert str(error_for(value)) == "bundle: must be a JSON object"


@pytest.mark.parametrize("schema", [None, "sidewisp.handoff/2", "", 1, ["sidewisp.handoff/1"]])
def test_it_rejects_a_missing_or_other_schema(schema: object) -> None:
    data = spec_example()
    data["schema"] = schema

    assert str(error_for(data)) == f'schema: must be "{SCHEMA}"'


@pytest.mark.parametrize("field", ["handoff_id", "operation_id"])
@pytest.mark.parametrize(
    ("value", "message"),
    [(None, "is required"), ("", "must not be empty"), (7, "must be a string"), (["h-1"], "must be a string")],
)
def test_it_requires_a_non_empty_string_id(field: str, value: object, message: str) -> None:
    data = spec_example()
    data[field] = value

    error = error_for(data)

    assert (error.field, error.message) == (field, message)


def test_it_requires_an_id_that_is_present() -> None:
    data = spec_example()
    del data["operation_id"]

    assert str(error_for(data)) == "operation_id: is required"


@pytest.mark.parametrize("value", ["healthy", "OK", 1])
def test_it_rejects_an_unknown_expected_verdict(value: object) -> None:
    data = spec_example()
    data["expect"] = value

    assert error_for(data).field == "expect"


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("value", [[], "created", 1, True, 0.5])
def test_it_rejects_a_part_that_is_not_an_object(part: str, value: object) -> None:
    data = spec_example()
    data[part] = value

    assert str(error_for(data)) == f"{part}: must be an object"


# --- wrong types for every field --------------------------------------------

TEXT_FIELDS = [
    ("created", "sender"),
    ("created", "receiver"),
    ("created", "route_version"),
    ("created", "tool_call_id"),
    ("reduced", "goto"),
    ("reduced", "active_agent_before"),
    ("reduced", "active_agent_after"),
    ("reduced", "graph_scope"),
    ("destination", "node_id"),
    ("destination", "attempt_id"),
    ("wait", "owner"),
    ("wait", "reason"),
    ("wait", "resume_token_id"),
    ("verification", "verifier"),
    ("verification", "receipt_id"),
]
LIST_FIELDS = [
    ("created", "required_context_keys"),
    ("created", "turn_tool_call_ids"),
    ("reduced", "tool_message_ids"),
    ("reduced", "context_keys"),
]
TIME_FIELDS = [
    ("created", "at"),
    ("reduced", "at"),
    ("destination", "started_at"),
    ("wait", "deadline_utc"),
    ("verification", "checked_at"),
]
BOOL_FIELDS = [("wait", "state_persisted"), ("wait", "resolved")]


@pytest.mark.parametrize(("part", "field"), TEXT_FIELDS)
@pytest.mark.parametrize("value", [1, 1.5, True, [], {}, ["sales"]])
def test_it_rejects_a_text_field_that_is_not_a_string(part: str, field: str, value: object) -> None:
    assert str(error_for(with_field(part, field, value))) == f"{part}.{field}: must be a string"


@pytest.mark.parametrize(("part", "field"), LIST_FIELDS)
@pytest.mark.parametrize("value", ["call_abc", 1, True, {"call_abc": 1}])
def test_it_rejects_a_list_field_that_is_not_a_list(part: str, field: str, value: object) -> None:
    assert str(error_for(with_field(part, field, value))) == f"{part}.{field}: must be a list of strings"


@pytest.mark.parametrize(("part", "field"), LIST_FIELDS)
@pytest.mark.parametrize("bad_entry", [1, None, True, ["a"], {"a": "b"}])
def test_it_names_the_list_entry_that_is_not_a_string(part: str, field: str, bad_entry: object) -> None:
    error = error_for(with_field(part, field, ["a", "b", bad_entry]))

    assert (error.field, error.message) == (f"{part}.{field}[2]", "must be a string")


@pytest.mark.parametrize(("part", "field"), TIME_FIELDS)
@pytest.mark.parametrize(
    "value",
    [
        "2026-07-30T10:00:00",  # naive
        "2026-07-30",  # a date, not a time
        "yesterday",
        "2026-13-01T10:00:00Z",
        "2026-07-30T25:00:00Z",
        "2026-07-30T10:00:00+24:00",
        "2026-07-30x10:00:00Z",
        "0001-01-01T00:00:00+01:00",  # before year 1 once moved to UTC
        " 2026-07-30T10:00:00Z",
        1785405600,
        True,
        ["2026-07-30T10:00:00Z"],
    ],
)
def test_it_rejects_a_time_without_a_zone_or_that_cannot_be_read(part: str, field: str, value: object) -> None:
    error = error_for(with_field(part, field, value))

    assert str(error) == f"{part}.{field}: must be an ISO 8601 time with a time zone"


def test_it_rejects_a_naive_time() -> None:
    assert str(error_for(with_field("wait", "deadline_utc", "2026-07-31T10:00:00"))) == (
        "wait.deadline_utc: must be an ISO 8601 time with a time zone"
    )


def test_it_does_not_chain_the_rejected_time_into_the_error() -> None:
    error = error_for(with_field("created", "at", f"{CANARY}T10:00:00Z"))

    assert error.__cause__ is None
    assert error.__context__ is None


@pytest.mark.parametrize(("part", "field"), BOOL_FIELDS)
@pytest.mark.parametrize("value", ["true", "false", 1, 0, "yes", []])
def test_it_rejects_a_boolean_that_is_not_a_real_boolean(part: str, field: str, value: object) -> None:
    assert str(error_for(with_field(part, field, value))) == f"{part}.{field}: must be true or false"


@pytest.mark.parametrize("value", ["PASS", "ok", "passed", "", True, 1])
def test_it_rejects_a_verification_result_other_than_pass_or_fail(value: object) -> None:
    assert str(error_for(with_field("verification", "result", value))) == (
        'verification.result: must be "pass" or "fail"'
    )


# --- minimization -----------------------------------------------------------


# Spec v1.3: every string of a bundle is an id or a name. One that may not be stored as it is (too long,
# control characters, an absolute path, a credential) is stored as `redacted:` and the first 12 hex digits of
# its SHA-256, and the rest of the bundle is kept: it is never an error.


def redaction_of(text: str) -> str:
    return "redacted:" + hashlib.sha256(text.encode()).hexdigest()[:12]


def stored_field(data: dict, part: str, field: str) -> object:
    return bundle_to_dict(parse_bundle(data))[part][field]


@pytest.mark.parametrize(("part", "field"), TEXT_FIELDS)
def test_a_string_longer_than_200_characters_is_stored_redacted(part: str, field: str) -> None:
    data = with_field(part, field, "x" * 201)

    assert stored_field(data, part, field) == redaction_of("x" * 201)
    assert bundle_to_dict(parse_bundle(data))["handoff_id"] == spec_example()["handoff_id"]


def test_a_long_id_at_the_top_level_is_stored_redacted() -> None:
    data = spec_example()
    data["handoff_id"] = "h" * 201

    assert parse_bundle(data).handoff_id == redaction_of("h" * 201)


def test_a_long_list_entry_is_redacted_and_its_neighbours_kept() -> None:
    data = with_field("reduced", "context_keys", ["a", "k" * 201])

    assert stored_field(data, "reduced", "context_keys") == ["a", redaction_of("k" * 201)]


@pytest.mark.parametrize(("part", "field"), LIST_FIELDS)
def test_it_rejects_a_list_with_more_than_100_entries(part: str, field: str) -> None:
    error = error_for(with_field(part, field, ["k"] * 101))

    assert str(error) == f"{part}.{field}: has more than 100 entries"


def test_a_huge_string_is_redacted_without_keeping_any_of_it() -> None:
    found = parse_bundle(with_field("created", "sender", CANARY * 500_000))

    assert found.created.sender == redaction_of(CANARY * 500_000)


@pytest.mark.parametrize(
    "text", ["sa\nles", "sales\r", "tab\there", "nul\x00", "del\x7f", "line\u2028sep", "bidi\u202e"]
)
def test_a_string_with_control_characters_is_stored_redacted(text: str) -> None:
    assert stored_field(with_field("created", "receiver", text), "created", "receiver") == redaction_of(text)


@pytest.mark.parametrize(
    "path",
    ["/etc/passwd", "/", "~/notes.txt", "~root", "C:\\Users\\me", "c:/temp", "\\\\server\\share", "file:///tmp/x"],
)
def test_a_string_that_looks_like_an_absolute_local_path_is_stored_redacted(path: str) -> None:
    data = with_field("verification", "receipt_id", path)

    assert stored_field(data, "verification", "receipt_id") == redaction_of(path)


def test_an_absolute_path_inside_a_list_is_redacted_alone() -> None:
    data = with_field("reduced", "context_keys", ["request_type", "/home/me/.env"])

    assert stored_field(data, "reduced", "context_keys") == ["request_type", redaction_of("/home/me/.env")]


def test_it_drops_unknown_fields_at_every_level() -> None:
    data = spec_example()
    data["prompt"] = "tell me everything"
    data["created"]["tool_args"] = {"card": "4111"}
    data["wait"]["message_body"] = ["hello"]

    assert bundle_to_dict(parse_bundle(data)) == spec_example()


def test_it_drops_an_unknown_field_even_when_its_value_would_be_invalid() -> None:
    data = with_field("reduced", "note", {"deeply": [object()]})
    data["extra"] = "x" * 10_000

    assert bundle_to_dict(parse_bundle(data)) == spec_example()


@pytest.mark.parametrize(
    "place",
    ["top-level value", "top-level name", "part value", "part name", "nested in an unknown part field"],
)
def test_it_never_echoes_a_canary_in_an_unknown_field(place: str) -> None:
    data = spec_example()
    if place == "top-level value":
        data["notes"] = CANARY
    elif place == "top-level name":
        data[CANARY] = "x"
    elif place == "part value":
        data["verification"]["detail"] = CANARY
    elif place == "part name":
        data["destination"][CANARY] = CANARY
    else:
        data["reduced"]["messages"] = [{"content": CANARY}]

    bundle = parse_bundle(data)

    assert CANARY not in repr(bundle_to_dict(bundle))
    assert CANARY not in repr(bundle)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (with_field("created", "sender", 20), "created.sender"),
        (with_field("reduced", "context_keys", ["ok", [CANARY]]), "reduced.context_keys[1]"),
        (with_field("wait", "deadline_utc", CANARY), "wait.deadline_utc"),
        (with_field("wait", "resolved", CANARY), "wait.resolved"),
        (with_field("verification", "result", CANARY), "verification.result"),
        (with_field("destination", "node_id", {"path": f"/srv/{CANARY}"}), "destination.node_id"),
        ({**spec_example(), "schema": CANARY}, "schema"),
        ({**spec_example(), "final_status": CANARY}, "final_status"),
        ({**spec_example(), "expect": CANARY}, "expect"),
        ({**spec_example(), "handoff_id": [CANARY]}, "handoff_id"),
    ],
)
def test_it_never_echoes_a_canary_in_an_error(data: dict, field: str) -> None:
    error = error_for(data)

    assert error.field == field
    assert CANARY not in str(error)
    assert CANARY not in repr(error)
    assert CANARY not in error.message


def test_it_formats_the_error_as_field_then_message() -> None:
    error = BundleError("reduced.context_keys[2]", "must be a string")

    assert isinstance(error, ValueError)
    assert str(error) == "reduced.context_keys[2]: must be a string"


def test_it_does_not_change_the_input_object() -> None:
    data = spec_example()
    data["extra"] = {"x": 1}
    before = copy.deepcopy(data)

    parse_bundle(data)

    assert data == before


# --- fuzz: anything JSON can hold --------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)
field_names = st.sampled_from(
    [f for _, f in TEXT_FIELDS + LIST_FIELDS + TIME_FIELDS + BOOL_FIELDS] + ["result", "unknown"]
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_it_raises_only_bundle_errors_for_any_json_value(value: object) -> None:
    try:
        parse_bundle(value)
    except BundleError as error:
        assert error.field


@settings(max_examples=200, deadline=None)
@given(
    part=st.sampled_from(PARTS),
    fields=st.dictionaries(field_names, json_values, max_size=5),
)
def test_it_either_parses_a_fuzzed_part_or_names_a_field_inside_it(part: str, fields: dict) -> None:
    data = spec_example()
    data[part] = fields
    try:
        bundle = parse_bundle(data)
    except BundleError as error:
        assert error.field.startswith(f"{part}.")
    else:
        assert isinstance(bundle, Bundle)
        assert parse_bundle(bundle_to_dict(bundle)) == bundle


# --- contracts --------------------------------------------------------------


def test_it_parses_a_contracts_document() -> None:
    contracts = parse_contracts(contracts_document())

    assert contracts.wait_reasons == frozenset({"purchase_approval", "secret_disclosure"})
    assert contracts.required_keys("routes/1", "triage", "sales") == ("request_type", "customer_tier")


def test_it_tells_a_declared_route_without_keys_from_an_undeclared_one() -> None:
    contracts = parse_contracts(contracts_document())

    assert contracts.required_keys("routes/1", "triage", "support") == ()
    assert contracts.required_keys("routes/1", "triage", "billing") is None
    assert contracts.required_keys("routes/1", "nobody", "sales") is None
    assert contracts.required_keys("routes/2", "triage", "sales") is None
    assert contracts.required_keys(None, None, None) is None


def test_it_serializes_contracts_back_to_the_same_document() -> None:
    document = contracts_document()

    assert contracts_to_dict(parse_contracts(document)) == document


def test_it_cannot_change_parsed_contracts_through_their_routes() -> None:
    contracts = parse_contracts(contracts_document())

    with pytest.raises(TypeError):
        contracts.routes["routes/1"]["triage"]["sales"] = ()  # type: ignore[index]


def test_it_accepts_empty_contracts() -> None:
    contracts = parse_contracts({"wait_reasons": [], "routes": {}})

    assert contracts == Contracts(wait_reasons=frozenset(), routes={})


def test_it_drops_unknown_fields_from_contracts() -> None:
    document = {**contracts_document(), "comment": CANARY}

    assert CANARY not in repr(contracts_to_dict(parse_contracts(document)))


@pytest.mark.parametrize("value", [None, [], "routes", 1])
def test_it_rejects_a_contracts_document_that_is_not_an_object(value: object) -> None:
    assert str(contracts_error_for(value)) == "contracts: must be a JSON object"


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda d: d.pop("wait_reasons"), "wait_reasons", "is required"),
        (lambda d: d.pop("routes"), "routes", "is required"),
        (lambda d: d.update(wait_reasons="purchase_approval"), "wait_reasons", "must be a list of strings"),
        (lambda d: d.update(wait_reasons=["ok", 3]), "wait_reasons[1]", "must be a string"),
        (lambda d: d.update(wait_reasons=[""]), "wait_reasons[0]", "must not be empty"),
        (lambda d: d.update(wait_reasons=["r"] * 101), "wait_reasons", "has more than 100 entries"),
        (lambda d: d.update(routes=[]), "routes", "must be an object"),
        (lambda d: d["routes"].update({"routes/2": ["triage"]}), "routes.routes/2", "must be an object"),
        (lambda d: d["routes"]["routes/1"].update(sales=None), "routes.routes/1.sales", "is required"),
        (
            lambda d: d["routes"]["routes/1"]["sales"].update(billing="order_id"),
            "routes.routes/1.sales.billing",
            "must be a list of strings",
        ),
        (
            lambda d: d["routes"]["routes/1"]["sales"].update(billing=["order_id", None]),
            "routes.routes/1.sales.billing[1]",
            "must be a string",
        ),
        (
            lambda d: d["routes"]["routes/1"]["sales"].update(billing=["a\nb"]),
            "routes.routes/1.sales.billing[0]",
            "must not contain control characters",
        ),
        (lambda d: d["routes"].update({"": {}}), "routes", "has an empty version name"),
        (
            lambda d: d["routes"]["routes/1"].update({"s" * 201: {}}),
            "routes.routes/1",
            "has a sender name that is longer than 200 characters",
        ),
        (
            lambda d: d["routes"]["routes/1"]["triage"].update({"/etc/passwd": []}),
            "routes.routes/1.triage",
            "has a receiver name that must not contain an absolute local path",
        ),
    ],
)
def test_it_rejects_a_bad_contracts_document_naming_the_field(change, field: str, message: str) -> None:
    document = contracts_document()
    change(document)

    error = contracts_error_for(document)

    assert (error.field, error.message) == (field, message)


def test_it_never_echoes_a_bad_contract_name() -> None:
    document = contracts_document()
    document["routes"]["routes/1"][CANARY * 20] = {}

    error = contracts_error_for(document)

    assert CANARY not in str(error)


@pytest.mark.parametrize("resolution", ["approved", "edited", "rejected", "expired", "cancelled"])
def test_a_decided_wait_keeps_its_resolution(resolution):
    part = parse_part("wait", {"resolved": True, "resolution": resolution})

    assert part_to_dict(part)["resolution"] == resolution


def test_it_refuses_a_resolution_the_spec_does_not_name():
    with pytest.raises(BundleError) as excinfo:
        parse_part("wait", {"resolved": True, "resolution": "maybe"})
    assert excinfo.value.field == "wait.resolution"


# --- v1.2: a step's tools on the destination, the contracts' steps ------------------


def test_a_destination_keeps_the_tools_its_model_call_was_given():
    part = parse_part("destination", {"node_id": "specialist", "tools": ["escalate", "provide_solution"]})

    assert part.tools == ("escalate", "provide_solution")
    assert part_to_dict(part)["tools"] == ["escalate", "provide_solution"]


def test_a_destination_given_no_tools_is_told_from_one_that_does_not_say():
    given_none = parse_part("destination", {"node_id": "specialist", "tools": []})
    silent = parse_part("destination", {"node_id": "specialist"})

    assert (given_none.tools, silent.tools) == ((), None)
    assert "tools" not in part_to_dict(silent)


@pytest.mark.parametrize(
    ("tools", "field", "message"),
    [
        ("provide_solution", "destination.tools", "must be a list of strings"),
        (["ok", 3], "destination.tools[1]", "must be a string"),
        (["t"] * 101, "destination.tools", "has more than 100 entries"),
        ([{"name": CANARY}], "destination.tools[0]", "must be a string"),
    ],
)
def test_it_rejects_destination_tools_that_are_not_names(tools, field: str, message: str):
    error = error_for(with_field("destination", "tools", tools))

    assert (error.field, error.message) == (field, message)
    assert CANARY not in str(error)


def steps_document() -> dict:
    document = contracts_document()
    document["routes"]["routes/4"] = {"collector": {"specialist": []}}
    document["steps"] = {"routes/4": {"key": "current_step", "tools": {"specialist": ["provide_solution"]}}}
    return document


def test_it_parses_a_route_versions_steps():
    contracts = parse_contracts(steps_document())

    assert contracts.steps["routes/4"].key == "current_step"
    assert contracts.step_tools("routes/4", "specialist") == ("provide_solution",)
    assert contracts.step_tools("routes/4", "collector") is None
    assert contracts.step_tools("routes/1", "sales") is None


def test_it_serializes_steps_back_to_the_same_document():
    document = steps_document()

    assert contracts_to_dict(parse_contracts(document)) == document


def test_a_document_without_steps_serializes_without_them():
    assert "steps" not in contracts_to_dict(parse_contracts(contracts_document()))


def test_a_steps_entry_may_name_its_variable_alone():
    contracts = parse_contracts({**steps_document(), "steps": {"routes/4": {"key": "current_step"}}})

    assert contracts.steps["routes/4"].tools == {}


def test_a_steps_entry_may_name_the_step_before_its_variable_is_set():
    # spec §2 v1.3, as the contracts document of issue 28 writes it
    document = steps_document()
    document["steps"]["routes/4"] = {
        "key": "current_step",
        "first": "warranty_collector",
        "tools": {"specialist": ["provide_solution"]},
    }

    contracts = parse_contracts(document)

    assert contracts.steps["routes/4"].first == "warranty_collector"
    assert contracts_to_dict(contracts) == document


def test_a_steps_entry_without_first_names_no_first_step_and_serializes_without_one():
    contracts = parse_contracts(steps_document())

    assert contracts.steps["routes/4"].first is None
    assert "first" not in contracts_to_dict(contracts)["steps"]["routes/4"]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda d: d.update(steps=[]), "steps", "must be an object"),
        (
            lambda d: d["steps"].update({"routes/9": {"key": "k"}}),
            "steps.routes/9",
            "names a version that routes does not declare",
        ),
        (lambda d: d["steps"].update({"routes/4": ["current_step"]}), "steps.routes/4", "must be an object"),
        (lambda d: d["steps"]["routes/4"].pop("key"), "steps.routes/4.key", "is required"),
        (lambda d: d["steps"]["routes/4"].update(key=""), "steps.routes/4.key", "must not be empty"),
        (lambda d: d["steps"]["routes/4"].update(key=3), "steps.routes/4.key", "must be a string"),
        (
            lambda d: d["steps"]["routes/4"].update(toolz={}),
            "steps.routes/4.toolz",
            "is not a known field (key, first, tools)",
        ),
        (lambda d: d["steps"]["routes/4"].update(first=""), "steps.routes/4.first", "must not be empty"),
        (lambda d: d["steps"]["routes/4"].update(first=["collector"]), "steps.routes/4.first", "must be a string"),
        (
            lambda d: d["steps"]["routes/4"].update(tools=["provide_solution"]),
            "steps.routes/4.tools",
            "must be an object",
        ),
        (
            lambda d: d["steps"]["routes/4"]["tools"].update(specialist="provide_solution"),
            "steps.routes/4.tools.specialist",
            "must be a list of strings",
        ),
        (
            lambda d: d["steps"]["routes/4"]["tools"].update(specialist=[""]),
            "steps.routes/4.tools.specialist[0]",
            "must not be empty",
        ),
        (
            lambda d: d["steps"]["routes/4"]["tools"].update({"/etc/passwd": []}),
            "steps.routes/4.tools",
            "has a step name that must not contain an absolute local path",
        ),
    ],
)
def test_it_rejects_bad_steps_naming_the_field(change, field: str, message: str):
    document = steps_document()
    change(document)

    error = contracts_error_for(document)

    assert (error.field, error.message) == (field, message)


def test_it_never_echoes_a_bad_steps_field_name():
    document = steps_document()
    document["steps"]["routes/4"][CANARY * 20] = 1

    assert CANARY not in str(contracts_error_for(document))


def test_it_cannot_change_parsed_steps():
    contracts = parse_contracts(steps_document())

    with pytest.raises(TypeError):
        contracts.steps["routes/4"].tools["specialist"] = ()  # type: ignore[index]
