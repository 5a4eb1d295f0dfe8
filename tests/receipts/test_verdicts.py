from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from receipts.verdicts import BOUNDARIES, NEXT_MOVES, VERDICT_BOUNDARY, Verdict, classify
from receipts.verdicts.bundle import VERDICTS, BundleError, Contracts, parse_bundle, parse_contracts
from tests.factories import healthy_bundle as healthy
from tests.factories import public_contracts

NOW = datetime(2026, 7, 30, 12, 0, tzinfo=UTC)
SHARED = (Path(__file__).resolve().parents[2] / ".." / "shared").resolve()
CASES_DIR = SHARED / "spec" / "cases"

# The public contracts.json, plus one route declared only under routes/2.
CONTRACTS_DOCUMENT = public_contracts()
CONTRACTS_DOCUMENT["routes"]["routes/2"]["triage"]["escalation"] = ["ticket_id"]


def contracts() -> Contracts:
    return parse_contracts(CONTRACTS_DOCUMENT)


def waiting() -> dict:
    """A healthy handoff paused on a valid wait for a person."""
    data = healthy()
    del data["verification"]
    data["final_status"] = "waiting"
    data["wait"] = {
        "owner": "ops-lead",
        "reason": "purchase_approval",
        "deadline_utc": "2026-07-31T10:00:00Z",
        "resume_token_id": "rt-1",
        "state_persisted": True,
        "resolved": False,
    }
    return data


def classify_dict(data: dict, now: datetime = NOW) -> Verdict:
    return classify(parse_bundle(data), contracts(), now)


def verdict_of(data: dict, now: datetime = NOW) -> str:
    return classify_dict(data, now).verdict


# --- the eight public cases --------------------------------------------------


def _public_cases() -> list:
    cases_file = CASES_DIR / "public.jsonl"
    if not cases_file.exists():
        reason = f"the shared spec folder is not checked out next to the repo ({cases_file} is missing)"
        return [pytest.param(None, id="shared-folder-missing", marks=pytest.mark.skip(reason=reason))]
    lines = [line for line in cases_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [pytest.param(json.loads(line), id=json.loads(line)["handoff_id"]) for line in lines]


PUBLIC_CASES = _public_cases()


@pytest.mark.parametrize("case", PUBLIC_CASES)
def test_it_gives_each_public_case_its_expected_verdict(case: dict) -> None:
    shared_contracts = parse_contracts(json.loads((CASES_DIR / "contracts.json").read_text(encoding="utf-8")))
    bundle = parse_bundle(case)

    assert classify(bundle, shared_contracts, NOW).verdict == bundle.expect


@pytest.mark.skipif(not (CASES_DIR / "public.jsonl").exists(), reason="the shared spec folder is not checked out")
def test_it_replays_all_eight_public_cases_covering_eight_verdicts() -> None:
    assert len(PUBLIC_CASES) == 8
    assert len({case.values[0]["expect"] for case in PUBLIC_CASES}) == 8


# --- HEALTHY ----------------------------------------------------------------


def test_it_calls_a_verified_completion_healthy() -> None:
    result = classify_dict(healthy())

    assert result.verdict == "HEALTHY"
    assert result.boundary is None
    assert result.next_move == "nothing"
    assert dict(result.boundaries) == {name: "pass" for name in BOUNDARIES} | {"wait": "not_applicable"}


@pytest.mark.parametrize("final_status", ["running", "failed", None])
def test_it_calls_a_proven_handoff_healthy_whatever_the_task_status_without_a_completion_claim(
    final_status: str | None,
) -> None:
    data = healthy()
    del data["verification"]
    data["final_status"] = final_status

    result = classify_dict(data)

    assert result.verdict == "HEALTHY"
    assert result.boundaries["wait"] == "not_applicable"
    assert result.boundaries["outcome"] == "not_applicable"


def test_it_calls_a_running_handoff_with_a_resolved_wait_healthy() -> None:
    data = waiting()
    data["wait"]["resolved"] = True
    data["final_status"] = "running"

    result = classify_dict(data)

    assert result.verdict == "HEALTHY"
    assert result.boundaries["wait"] == "not_applicable"


def test_it_ignores_the_expected_verdict_in_the_bundle() -> None:
    data = healthy()
    data["reduced"]["goto"] = "support"
    data["expect"] = "HEALTHY"

    assert verdict_of(data) == "ROUTE_REJECTED"


# --- ROUTE_REJECTED ---------------------------------------------------------


def test_it_rejects_a_handoff_without_a_created_receipt() -> None:
    data = healthy()
    del data["created"]

    assert verdict_of(data) == "ROUTE_REJECTED"


def test_it_rejects_a_goto_that_names_another_node() -> None:
    data = healthy()
    data["reduced"]["goto"] = "support"

    result = classify_dict(data)

    assert result.verdict == "ROUTE_REJECTED"
    assert result.reason == "reduced.goto does not equal created.receiver"
    assert result.next_move == "block the transfer; restore the declared route"


def test_it_rejects_a_missing_goto() -> None:
    data = healthy()
    del data["reduced"]["goto"]

    assert verdict_of(data) == "ROUTE_REJECTED"


def test_it_rejects_an_unknown_route_version() -> None:
    data = healthy()
    data["created"]["route_version"] = "routes/9"

    assert classify_dict(data).reason == 'created.route_version "routes/9" is not a known contract version'


@pytest.mark.parametrize(
    ("source", "origin"),
    [
        ("middleware", "given as SidewispMiddleware(route_version=...)"),
        ("observe", "given as observe(route_version=...)"),
        ("default", "the default: neither SidewispMiddleware nor observe was given a route_version"),
    ],
)
def test_a_rejected_route_names_its_version_and_where_the_version_came_from(source, origin) -> None:
    data = healthy()
    data["created"].update(route_version="teams/1", route_version_source=source)

    assert classify_dict(data).reason == f'created.route_version "teams/1" ({origin}) is not a known contract version'


def test_a_route_version_source_that_is_not_one_of_the_three_is_refused_naming_the_field() -> None:
    data = healthy()
    data["created"]["route_version_source"] = "somewhere"

    with pytest.raises(BundleError) as refused:
        parse_bundle(data)

    assert refused.value.field == "created.route_version_source"


def test_it_rejects_a_route_declared_only_under_another_version() -> None:
    data = healthy()
    data["created"]["receiver"] = data["reduced"]["goto"] = data["reduced"]["active_agent_after"] = "escalation"
    data["destination"]["node_id"] = "escalation"
    data["reduced"]["context_keys"] = ["ticket_id"]

    assert verdict_of(data) == "ROUTE_REJECTED"
    data["created"]["route_version"] = "routes/2"
    assert verdict_of(data) == "HEALTHY"


def test_it_rejects_a_receiver_not_declared_for_the_sender() -> None:
    data = healthy()
    data["created"]["receiver"] = data["reduced"]["goto"] = "billing"

    assert classify_dict(data).reason == (
        'created.receiver is not declared for created.sender in route version "routes/1"'
    )


@pytest.mark.parametrize("field", ["sender", "receiver", "route_version"])
@pytest.mark.parametrize("value", [None, ""])
def test_it_rejects_a_created_receipt_missing_a_route_field(field: str, value: str | None) -> None:
    data = healthy()
    data["created"][field] = value

    assert classify_dict(data).reason == f"created.{field} is missing"


# --- STALE_CONTROL ----------------------------------------------------------


def test_it_calls_a_missing_reduced_receipt_stale_control_not_a_rejected_route() -> None:
    data = healthy()
    del data["reduced"]

    result = classify_dict(data)

    assert result.verdict == "STALE_CONTROL"
    assert result.boundaries["route"] == "pass"


def test_it_calls_control_stale_when_the_active_agent_stays_with_the_sender() -> None:
    data = healthy()
    data["reduced"]["active_agent_after"] = "triage"

    result = classify_dict(data)

    assert result.verdict == "STALE_CONTROL"
    assert result.next_move == "reconcile the persisted state before any retry"


@pytest.mark.parametrize("value", ["support", "", None])
def test_it_calls_control_stale_when_the_agent_before_is_not_the_sender(value: str | None) -> None:
    data = healthy()
    data["reduced"]["active_agent_before"] = value

    assert verdict_of(data) == "STALE_CONTROL"


def test_it_calls_control_stale_when_the_agent_after_is_missing() -> None:
    data = healthy()
    data["reduced"]["active_agent_after"] = None

    assert verdict_of(data) == "STALE_CONTROL"


# --- OPEN_TOOL_PROTOCOL -----------------------------------------------------


@pytest.mark.parametrize("ids", [[], ["call_other"], None])
def test_it_leaves_the_tool_protocol_open_without_a_matching_tool_message(ids: list[str] | None) -> None:
    data = healthy()
    data["reduced"]["tool_message_ids"] = ids

    assert verdict_of(data) == "OPEN_TOOL_PROTOCOL"


def test_it_leaves_the_tool_protocol_open_when_the_tool_message_is_duplicated() -> None:
    data = healthy()
    data["reduced"]["tool_message_ids"] = ["call_abc", "call_abc"]

    result = classify_dict(data)

    assert result.verdict == "OPEN_TOOL_PROTOCOL"
    assert result.reason == "more than one entry of reduced.tool_message_ids equals created.tool_call_id"


def test_it_accepts_other_tool_messages_beside_the_one_match() -> None:
    data = healthy()
    data["reduced"]["tool_message_ids"] = ["call_earlier", "call_abc"]

    assert verdict_of(data) == "HEALTHY"


def test_it_leaves_the_tool_protocol_open_when_another_call_of_the_turn_is_unanswered() -> None:
    # [lookup_fare, transfer_to_ben] in one AI message; the update answers only the transfer.
    data = healthy()
    data["created"]["turn_tool_call_ids"] = ["call_abc", "call_lookup"]
    data["reduced"]["tool_message_ids"] = ["call_abc"]

    result = classify_dict(data)

    assert result.verdict == "OPEN_TOOL_PROTOCOL"
    assert result.boundaries["tool_protocol"] == "fail"
    assert "created.turn_tool_call_ids" in result.reason
    assert "call_lookup" not in result.reason


def test_it_calls_a_turn_whose_every_call_is_answered_healthy() -> None:
    data = healthy()
    data["created"]["turn_tool_call_ids"] = ["call_abc", "call_lookup"]
    data["reduced"]["tool_message_ids"] = ["call_lookup", "call_abc"]

    assert verdict_of(data) == "HEALTHY"


def test_it_leaves_the_tool_protocol_open_when_another_call_of_the_turn_is_answered_twice() -> None:
    data = healthy()
    data["created"]["turn_tool_call_ids"] = ["call_abc", "call_lookup"]
    data["reduced"]["tool_message_ids"] = ["call_abc", "call_lookup", "call_lookup"]

    assert verdict_of(data) == "OPEN_TOOL_PROTOCOL"


@pytest.mark.parametrize("turn", [None, [], ["call_abc"]])
def test_it_checks_only_the_transfers_own_call_without_other_calls_of_the_turn(turn: list[str] | None) -> None:
    data = healthy()
    data["created"]["turn_tool_call_ids"] = turn

    assert verdict_of(data) == "HEALTHY"


def test_it_still_finds_the_transfers_own_call_unanswered_when_the_other_calls_are() -> None:
    data = healthy()
    data["created"]["turn_tool_call_ids"] = ["call_abc", "call_lookup"]
    data["reduced"]["tool_message_ids"] = ["call_lookup"]

    result = classify_dict(data)

    assert result.reason == "no entry of reduced.tool_message_ids equals created.tool_call_id"


def test_it_keeps_an_earlier_failure_ahead_of_an_open_turn() -> None:
    data = healthy()
    data["created"]["turn_tool_call_ids"] = ["call_abc", "call_lookup"]
    data["reduced"]["active_agent_after"] = data["created"]["sender"]

    assert verdict_of(data) == "STALE_CONTROL"


@pytest.mark.parametrize("call_id", [None, ""])
def test_it_leaves_the_tool_protocol_open_without_a_tool_call_id(call_id: str | None) -> None:
    data = healthy()
    data["created"]["tool_call_id"] = call_id
    data["reduced"]["tool_message_ids"] = [""]

    assert verdict_of(data) == "OPEN_TOOL_PROTOCOL"


# --- CONTEXT_INCOMPLETE -----------------------------------------------------


def test_it_calls_context_incomplete_when_a_required_key_is_missing() -> None:
    data = healthy()
    data["reduced"]["context_keys"] = ["request_type", "customer_tier"]

    result = classify_dict(data)

    assert result.verdict == "CONTEXT_INCOMPLETE"
    assert result.next_move == "rebuild the minimal transfer contract"


def test_it_lets_the_contract_keys_win_over_fewer_keys_claimed_by_the_receipt() -> None:
    data = healthy()
    data["created"]["required_context_keys"] = ["request_type"]
    data["reduced"]["context_keys"] = ["request_type"]

    assert verdict_of(data) == "CONTEXT_INCOMPLETE"


def test_it_lets_the_contract_keys_win_over_extra_keys_claimed_by_the_receipt() -> None:
    data = healthy()
    data["created"]["required_context_keys"].append("favourite_colour")

    assert verdict_of(data) == "HEALTHY"


def test_it_uses_the_keys_of_the_version_the_handoff_names() -> None:
    data = healthy()
    data["created"]["route_version"] = "routes/2"

    assert verdict_of(data) == "CONTEXT_INCOMPLETE"
    data["reduced"]["context_keys"].append("region")
    assert verdict_of(data) == "HEALTHY"


# --- DESTINATION_NOT_STARTED ------------------------------------------------


def test_it_calls_a_destination_without_a_receipt_not_started() -> None:
    data = healthy()
    del data["destination"]

    result = classify_dict(data)

    assert result.verdict == "DESTINATION_NOT_STARTED"
    assert result.next_move == "inspect routing and node permissions"


@pytest.mark.parametrize(("field", "value"), [("node_id", "support"), ("node_id", None), ("started_at", None)])
def test_it_calls_a_destination_not_started_when_a_fact_is_wrong(field: str, value: str | None) -> None:
    data = healthy()
    data["destination"][field] = value

    assert verdict_of(data) == "DESTINATION_NOT_STARTED"


# --- steps of one agent (spec v1.2): the step's model call got the declared tools --

STEP_CONTRACTS_DOCUMENT = {
    "wait_reasons": [],
    "routes": {
        "routes/4": {"collector": {"specialist": [], "closer": []}},
        "routes/5": {"collector": {"specialist": []}},
    },
    "steps": {"routes/4": {"key": "current_step", "tools": {"specialist": ["provide_solution", "escalate"]}}},
}


def step_handoff(receiver: str = "specialist", tools: list[str] | None = None, version: str = "routes/4") -> dict:
    """A proven collector -> `receiver` step change whose next model call was given `tools`."""
    destination = {"node_id": receiver, "started_at": "2026-07-30T10:00:02Z", "attempt_id": "a-1"}
    if tools is not None:
        destination["tools"] = tools
    return healthy(
        created={"sender": "collector", "receiver": receiver, "route_version": version, "tool_call_id": "call_abc"},
        reduced={
            "goto": receiver,
            "active_agent_before": "collector",
            "active_agent_after": receiver,
            "graph_scope": "parent",
            "tool_message_ids": ["call_abc"],
            "context_keys": [],
        },
        destination=destination,
    )


def step_verdict(data: dict) -> Verdict:
    return classify(parse_bundle(data), parse_contracts(STEP_CONTRACTS_DOCUMENT), NOW)


def test_it_calls_a_step_whose_model_call_got_the_declared_tools_healthy() -> None:
    assert step_verdict(step_handoff(tools=["escalate", "provide_solution"])).verdict == "HEALTHY"


def test_it_compares_a_steps_tools_whatever_their_order() -> None:
    assert step_verdict(step_handoff(tools=["provide_solution", "escalate"])).verdict == "HEALTHY"


@pytest.mark.parametrize(
    "tools",
    [
        ["provide_solution"],
        ["escalate", "provide_solution", "refund"],
        ["escalate", "escalate", "provide_solution"],
        [],
    ],
)
def test_it_calls_a_step_not_started_when_its_model_call_got_other_tools(tools: list[str]) -> None:
    result = step_verdict(step_handoff(tools=tools))

    assert (result.verdict, result.boundary) == ("DESTINATION_NOT_STARTED", "destination")
    assert result.reason == "destination.tools does not equal the tools the contract declares for the step"


def test_it_calls_a_step_not_started_when_the_destination_does_not_say_which_tools_it_got() -> None:
    result = step_verdict(step_handoff(tools=None))

    assert result.verdict == "DESTINATION_NOT_STARTED"
    assert result.reason == "destination.tools is missing for a step whose tools the contract declares"


def test_it_leaves_the_tools_of_a_step_the_contract_declares_none_for_unchecked() -> None:
    assert step_verdict(step_handoff(receiver="closer", tools=None)).verdict == "HEALTHY"
    assert step_verdict(step_handoff(receiver="closer", tools=["anything"])).verdict == "HEALTHY"


def test_it_checks_the_tools_of_the_version_the_handoff_names() -> None:
    assert step_verdict(step_handoff(tools=None, version="routes/5")).verdict == "HEALTHY"


def test_it_lets_a_rejected_step_route_hide_nothing_behind_the_tools() -> None:
    data = step_handoff(receiver="nowhere", tools=["escalate", "provide_solution"])

    assert step_verdict(data).verdict == "ROUTE_REJECTED"


def test_it_keeps_a_destination_that_started_another_step_not_started_whatever_its_tools() -> None:
    data = step_handoff(tools=["escalate", "provide_solution"])
    data["destination"]["node_id"] = "collector"

    assert step_verdict(data).reason == "destination.node_id does not equal created.receiver"


# --- WAITING_ON_APPROVAL and UNCERTAIN --------------------------------------


def test_it_calls_a_valid_open_wait_waiting_on_approval() -> None:
    result = classify_dict(waiting())

    assert result.verdict == "WAITING_ON_APPROVAL"
    assert result.boundary == "wait"
    assert result.next_move == "notify the owner and keep the state"


@pytest.mark.parametrize("final_status", ["running", None])
def test_it_calls_a_valid_open_wait_waiting_whatever_the_running_status(final_status: str | None) -> None:
    data = waiting()
    data["final_status"] = final_status

    assert verdict_of(data) == "WAITING_ON_APPROVAL"


def test_it_counts_a_wait_without_a_resolved_field_as_open() -> None:
    data = waiting()
    del data["wait"]["resolved"]
    data["final_status"] = "running"

    assert verdict_of(data) == "WAITING_ON_APPROVAL"


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("owner", None, "wait.owner is missing"),
        ("owner", "", "wait.owner is missing"),
        ("reason", "curiosity", "wait.reason is not a declared wait reason"),
        ("reason", None, "wait.reason is not a declared wait reason"),
        ("deadline_utc", None, "wait.deadline_utc is missing"),
        ("deadline_utc", "2026-07-30T11:59:59Z", "wait.deadline_utc is not later than now"),
        ("resume_token_id", None, "wait.resume_token_id is missing"),
        ("resume_token_id", "", "wait.resume_token_id is missing"),
        ("state_persisted", False, "wait.state_persisted is not true"),
        ("state_persisted", None, "wait.state_persisted is not true"),
    ],
)
def test_it_calls_a_wait_missing_any_of_the_five_facts_uncertain(field: str, value: object, reason: str) -> None:
    data = waiting()
    data["wait"][field] = value

    result = classify_dict(data)

    assert (result.verdict, result.reason) == ("UNCERTAIN", reason)
    assert result.next_move == "find an owner, deadline or token"


def test_it_calls_a_wait_whose_deadline_is_exactly_now_uncertain() -> None:
    data = waiting()
    data["wait"]["deadline_utc"] = "2026-07-30T12:00:00Z"

    assert verdict_of(data) == "UNCERTAIN"
    assert verdict_of(data, now=NOW - timedelta(microseconds=1)) == "WAITING_ON_APPROVAL"


def test_it_compares_the_deadline_with_a_now_in_any_time_zone() -> None:
    data = waiting()
    data["wait"]["deadline_utc"] = "2026-07-30T12:00:00Z"
    same_moment_elsewhere = datetime(2026, 7, 30, 14, 0, tzinfo=timezone(timedelta(hours=2)))

    assert verdict_of(data, now=same_moment_elsewhere) == "UNCERTAIN"


def test_it_calls_waiting_without_a_wait_receipt_uncertain() -> None:
    data = waiting()
    del data["wait"]

    result = classify_dict(data)

    assert result.verdict == "UNCERTAIN"
    assert result.boundaries["wait"] == "fail"


def test_it_calls_waiting_with_only_a_resolved_wait_uncertain() -> None:
    data = waiting()
    data["wait"]["resolved"] = True

    assert verdict_of(data) == "UNCERTAIN"


def test_it_calls_an_invalid_open_wait_uncertain_even_while_running() -> None:
    data = waiting()
    data["wait"]["owner"] = None
    data["final_status"] = "running"

    assert verdict_of(data) == "UNCERTAIN"


# --- FALSE_COMPLETE ---------------------------------------------------------


def test_it_calls_a_completion_without_verification_false() -> None:
    data = healthy()
    del data["verification"]

    result = classify_dict(data)

    assert result.verdict == "FALSE_COMPLETE"
    assert result.next_move == "reopen the task; do not trust the final message"


@pytest.mark.parametrize(("field", "value"), [("result", "fail"), ("result", None), ("checked_at", None)])
def test_it_calls_a_completion_with_an_unproven_verification_false(field: str, value: str | None) -> None:
    data = healthy()
    data["verification"][field] = value

    assert verdict_of(data) == "FALSE_COMPLETE"


def test_it_calls_a_completion_verified_before_the_destination_started_false() -> None:
    data = healthy()
    data["verification"]["checked_at"] = "2026-07-30T10:00:01Z"

    assert classify_dict(data).reason == "verification.checked_at is earlier than destination.started_at"


def test_it_accepts_a_verification_at_the_same_moment_the_destination_started() -> None:
    data = healthy()
    data["verification"]["checked_at"] = data["destination"]["started_at"]

    assert verdict_of(data) == "HEALTHY"


def test_it_lets_the_outcome_decide_a_completion_claimed_over_an_open_wait() -> None:
    data = waiting()
    data["wait"]["owner"] = None  # would be UNCERTAIN if the wait decided
    data["final_status"] = "complete"

    assert verdict_of(data) == "FALSE_COMPLETE"
    data["verification"] = healthy()["verification"]
    result = classify_dict(data)
    assert result.verdict == "HEALTHY"
    assert result.boundaries["wait"] == "not_applicable"


# --- boundary status maps ---------------------------------------------------


def test_it_marks_every_boundary_after_a_rejected_route_not_reached() -> None:
    data = healthy()
    data["reduced"]["goto"] = "support"
    del data["destination"]

    assert list(classify_dict(data).boundaries.items()) == [
        ("route", "fail"),
        ("control", "not_reached"),
        ("tool_protocol", "not_reached"),
        ("context", "not_reached"),
        ("destination", "not_reached"),
        ("wait", "not_reached"),
        ("outcome", "not_reached"),
    ]


def test_it_marks_the_boundaries_before_incomplete_context_passed() -> None:
    data = healthy()
    data["reduced"]["context_keys"] = []

    assert list(classify_dict(data).boundaries.items()) == [
        ("route", "pass"),
        ("control", "pass"),
        ("tool_protocol", "pass"),
        ("context", "fail"),
        ("destination", "not_reached"),
        ("wait", "not_reached"),
        ("outcome", "not_reached"),
    ]


def test_it_marks_a_valid_wait_waiting_and_the_outcome_not_reached() -> None:
    assert dict(classify_dict(waiting()).boundaries) == {
        "route": "pass",
        "control": "pass",
        "tool_protocol": "pass",
        "context": "pass",
        "destination": "pass",
        "wait": "waiting",
        "outcome": "not_reached",
    }


def test_it_marks_a_wait_that_does_not_apply_before_a_false_completion() -> None:
    data = healthy()
    data["verification"]["result"] = "fail"

    boundaries = classify_dict(data).boundaries

    assert (boundaries["wait"], boundaries["outcome"]) == ("not_applicable", "fail")


# --- the classifier's own contract ------------------------------------------


def test_it_refuses_a_naive_now() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        classify(parse_bundle(healthy()), contracts(), datetime(2026, 7, 30, 12, 0))


def test_it_has_a_boundary_and_a_next_move_for_every_verdict() -> None:
    assert set(NEXT_MOVES) == set(VERDICTS)
    assert set(VERDICT_BOUNDARY) == set(VERDICTS)
    assert {b for b in VERDICT_BOUNDARY.values() if b is not None} == set(BOUNDARIES)


def test_it_explains_a_verdict_without_repeating_any_value() -> None:
    data = healthy()
    data["created"]["sender"] = data["reduced"]["active_agent_before"] = "CANARY-SECRET-9f2c"

    result = classify_dict(data)

    assert result.verdict == "ROUTE_REJECTED"
    assert "CANARY" not in result.reason
    assert "CANARY" not in repr(result)


def test_it_gives_the_same_verdict_for_the_same_values() -> None:
    bundle, rules = parse_bundle(waiting()), contracts()

    assert classify(bundle, rules, NOW) == classify(bundle, rules, NOW)


def test_a_healthy_verdict_is_made_once_per_set_of_statuses_and_shared() -> None:
    """Issue 32 §2: a Verdict is frozen; the HEALTHY one most handoffs get is not built again for each."""
    from types import MappingProxyType

    complete = classify(parse_bundle(healthy()), contracts(), NOW)
    again = classify(parse_bundle(healthy("h-2")), contracts(), NOW + timedelta(hours=1))
    running = classify(parse_bundle(healthy(final_status="running")), contracts(), NOW)

    assert again is complete
    assert complete == Verdict(
        verdict="HEALTHY",
        boundary=None,
        next_move=NEXT_MOVES["HEALTHY"],
        boundaries=MappingProxyType({**dict.fromkeys(BOUNDARIES, "pass"), "wait": "not_applicable"}),
        reason="every boundary that applies is proven by a receipt",
    )
    assert running.verdict == "HEALTHY" and running is not complete
    assert running.boundaries == {
        **dict.fromkeys(BOUNDARIES, "pass"),
        "wait": "not_applicable",
        "outcome": "not_applicable",
    }
    with pytest.raises(TypeError):
        complete.boundaries["route"] = "fail"  # shared, and read-only
