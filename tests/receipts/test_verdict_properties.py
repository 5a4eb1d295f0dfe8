"""Properties of the classifier over bundles perturbed from a healthy one.

Every generated bundle starts as a proven triage -> sales handoff (completed or
paused on a valid wait) and then has parts dropped, names swapped among a small
alphabet, ids dropped or duplicated, context keys removed, times moved around
`now`, booleans flipped and the final status changed. A third start is a step
of one agent (spec v1.2): under routes/2 the contracts declare the tools each
step's model call must be given, and edits change the tools it got.
"""

from __future__ import annotations

import copy
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from receipts.verdicts import BOUNDARIES, NEXT_MOVES, VERDICT_BOUNDARY, Verdict, classify
from receipts.verdicts.bundle import (
    FINAL_STATUSES,
    PARTS,
    VERDICTS,
    Bundle,
    Contracts,
    Created,
    Destination,
    Reduced,
    StepRules,
    Verification,
    Wait,
    bundle_to_dict,
    parse_bundle,
    parse_contracts,
)
from tests.factories import healthy_bundle as healthy
from tests.factories import public_contracts

NOW = datetime(2026, 7, 30, 12, 0, tzinfo=UTC)
STARTED_AT = "2026-07-30T10:00:02Z"
NAMES = ["triage", "sales", "support", "billing", "nowhere"]
KEYS = ["request_type", "customer_tier", "consent_status", "region", "ticket_id"]
CALL_IDS = ["call_abc", "call_other", ""]
TOOLS = ["quote_price", "refund", "lookup"]
DROP = object()  # an edit value meaning "delete this part or field"

STEPS = {"routes/2": {"key": "current_step", "tools": {"sales": ["quote_price", "lookup"], "billing": []}}}
CONTRACTS = parse_contracts({**public_contracts(), "steps": STEPS})

VALID_WAIT = {
    "owner": "ops-lead",
    "reason": "purchase_approval",
    "deadline_utc": "2026-07-31T10:00:00Z",
    "resume_token_id": "rt-1",
    "state_persisted": True,
    "resolved": False,
}
PASSING_VERIFICATION = {
    "verifier": "order_exists",
    "result": "pass",
    "checked_at": "2026-07-30T10:05:00Z",
    "receipt_id": "v-1",
}


def stepped() -> dict:
    """A healthy routes/2 handoff whose destination's model call got the step's declared tools."""
    data = healthy()
    data["created"]["route_version"] = "routes/2"
    data["reduced"]["context_keys"].append("region")
    data["destination"]["tools"] = ["lookup", "quote_price"]
    return data


def paused() -> dict:
    data = healthy()
    del data["verification"]
    data["wait"] = dict(VALID_WAIT)
    data["final_status"] = "waiting"
    return data


# --- strategies -------------------------------------------------------------


def _maybe(values: st.SearchStrategy) -> st.SearchStrategy:
    return values | st.none() | st.just(DROP)


def _edit(part: str, field: str, values: st.SearchStrategy) -> st.SearchStrategy:
    return st.tuples(st.just((part, field)), _maybe(values))


zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
# Seconds around `now` (0 is included and is where hypothesis likes to shrink).
times = st.builds(
    lambda seconds, micros, zone: (NOW + timedelta(seconds=seconds, microseconds=micros)).astimezone(zone).isoformat(),
    st.integers(-4 * 3600, 4 * 3600),
    st.sampled_from([0, 0, 250_000]),
    zones,
)
names = st.sampled_from([*NAMES, ""])
name_lists = st.lists(st.sampled_from(KEYS), max_size=5)
call_id_lists = st.lists(st.sampled_from(CALL_IDS), max_size=3)

EDITS = st.one_of(
    st.tuples(st.sampled_from([(part, None) for part in PARTS]), st.just(DROP)),
    st.tuples(st.just(("wait", None)), st.just(VALID_WAIT)),
    st.tuples(st.just(("verification", None)), st.just(PASSING_VERIFICATION)),
    st.tuples(st.just(("final_status", None)), _maybe(st.sampled_from(FINAL_STATUSES))),
    *[
        _edit(part, field, names)
        for part, field in [
            ("created", "sender"),
            ("created", "receiver"),
            ("reduced", "goto"),
            ("reduced", "active_agent_before"),
            ("reduced", "active_agent_after"),
            ("destination", "node_id"),
        ]
    ],
    _edit("created", "route_version", st.sampled_from(["routes/1", "routes/2", "routes/9", ""])),
    _edit("created", "tool_call_id", st.sampled_from(CALL_IDS)),
    _edit("reduced", "tool_message_ids", call_id_lists),
    _edit("reduced", "context_keys", name_lists),
    _edit("destination", "tools", st.lists(st.sampled_from(TOOLS), max_size=3)),
    _edit("created", "required_context_keys", name_lists),
    *[
        _edit(part, field, times)
        for part, field in [
            ("created", "at"),
            ("destination", "started_at"),
            ("wait", "deadline_utc"),
            ("verification", "checked_at"),
        ]
    ],
    _edit("wait", "owner", st.sampled_from(["ops-lead", ""])),
    _edit("wait", "reason", st.sampled_from(["purchase_approval", "curiosity", ""])),
    _edit("wait", "resume_token_id", st.sampled_from(["rt-1", ""])),
    _edit("wait", "state_persisted", st.booleans()),
    _edit("wait", "resolved", st.booleans()),
    _edit("verification", "result", st.sampled_from(["pass", "fail"])),
)


def _apply(data: dict, edits: list[tuple[tuple[str, str | None], object]]) -> dict:
    data = copy.deepcopy(data)
    for (part, field), value in edits:
        if field is None:
            if value is DROP:
                data.pop(part, None)
            else:
                data[part] = copy.deepcopy(value)
            continue
        target = data.setdefault(part, {})
        if value is DROP:
            target.pop(field, None)
        else:
            target[field] = value
    return data


bundle_dicts = st.builds(_apply, st.sampled_from([healthy(), paused(), stepped()]), st.lists(EDITS, max_size=6))
bundles = bundle_dicts.map(parse_bundle)


# --- (a) later evidence never changes an earlier verdict --------------------


def _with_healthy_control(bundle: Bundle) -> Bundle:
    created = bundle.created or Created(sender="triage", receiver="sales")
    reduced = bundle.reduced or Reduced(goto=created.receiver)
    return replace(
        bundle, reduced=replace(reduced, active_agent_before=created.sender, active_agent_after=created.receiver)
    )


def _with_healthy_tool_protocol(bundle: Bundle) -> Bundle:
    call_id = (bundle.created and bundle.created.tool_call_id) or "call_abc"
    created = bundle.created and replace(bundle.created, tool_call_id=call_id)
    reduced = bundle.reduced and replace(bundle.reduced, tool_message_ids=(call_id,))
    return replace(bundle, created=created, reduced=reduced)


def _with_healthy_context(bundle: Bundle) -> Bundle:
    created, reduced = bundle.created, bundle.reduced
    if reduced is None:
        return bundle
    required = created and CONTRACTS.required_keys(created.route_version, created.sender, created.receiver)
    return replace(bundle, reduced=replace(reduced, context_keys=tuple(required or KEYS)))


def _with_healthy_destination(bundle: Bundle) -> Bundle:
    node_id = (bundle.created and bundle.created.receiver) or "sales"
    started_at = datetime(2026, 7, 30, 10, 0, 2, tzinfo=UTC)
    tools = CONTRACTS.step_tools(bundle.created and bundle.created.route_version, node_id)
    destination = Destination(node_id=node_id, started_at=started_at, attempt_id="a-1", tools=tools)
    return replace(bundle, destination=destination)


def _with_healthy_wait(bundle: Bundle) -> Bundle:
    # The status claim is evidence for both wait and outcome; "waiting" needs an open wait.
    final_status = "running" if bundle.final_status == "waiting" else bundle.final_status
    return replace(bundle, wait=None, final_status=final_status)


def _with_healthy_outcome(bundle: Bundle) -> Bundle:
    started_at = bundle.destination and bundle.destination.started_at
    checked_at = started_at or datetime(2026, 7, 30, 10, 5, tzinfo=UTC)
    verification = Verification(verifier="order_exists", result="pass", checked_at=checked_at, receipt_id="v-1")
    return replace(bundle, verification=verification)


HEALTHY_EVIDENCE = {
    "control": _with_healthy_control,
    "tool_protocol": _with_healthy_tool_protocol,
    "context": _with_healthy_context,
    "destination": _with_healthy_destination,
    "wait": _with_healthy_wait,
    "outcome": _with_healthy_outcome,
}


@settings(max_examples=200, deadline=None)
@given(bundle=bundles, data=st.data())
def test_healthy_evidence_after_the_deciding_boundary_never_changes_the_verdict(bundle: Bundle, data) -> None:
    before = classify(bundle, CONTRACTS, NOW)
    if before.boundary is None:
        return
    later = BOUNDARIES[BOUNDARIES.index(before.boundary) + 1 :]
    if not later:
        return
    chosen = data.draw(st.lists(st.sampled_from(later), min_size=1, unique=True))

    for boundary in chosen:
        bundle = HEALTHY_EVIDENCE[boundary](bundle)

    assert classify(bundle, CONTRACTS, NOW) == before


def test_healthy_evidence_replacements_really_are_healthy() -> None:
    """Guards property (a) against replacements that would prove nothing."""
    broken = parse_bundle({**healthy(), "reduced": None, "destination": None, "verification": None})
    repaired = broken
    for boundary in ("control", "tool_protocol", "context", "destination", "wait", "outcome"):
        repaired = HEALTHY_EVIDENCE[boundary](repaired)

    assert classify(broken, CONTRACTS, NOW).verdict == "STALE_CONTROL"
    assert classify(repaired, CONTRACTS, NOW).verdict == "HEALTHY"


def test_a_healthy_destination_replacement_gives_a_step_its_declared_tools() -> None:
    broken = parse_bundle({**stepped(), "destination": None})

    assert classify(broken, CONTRACTS, NOW).verdict == "DESTINATION_NOT_STARTED"
    assert classify(_with_healthy_destination(broken), CONTRACTS, NOW).verdict == "HEALTHY"


@settings(max_examples=200, deadline=None)
@given(bundles)
def test_a_step_given_other_tools_than_declared_never_gets_past_its_destination(bundle: Bundle) -> None:
    created, destination = bundle.created, bundle.destination
    declared = CONTRACTS.step_tools(created.route_version, created.receiver) if created else None
    if declared is None or destination is None or sorted(destination.tools or ()) == sorted(declared):
        return

    boundary = classify(bundle, CONTRACTS, NOW).boundary

    assert boundary in BOUNDARIES[: BOUNDARIES.index("destination") + 1]


# --- (b) less evidence never makes a handoff healthy ------------------------


def _removals(bundle: Bundle) -> list[Bundle]:
    """Every bundle with one piece of evidence less.

    Left out on purpose, because the spec makes them change the verdict: the
    final status (a claim, not evidence), a wait receipt while no wait or
    completion is claimed (nothing then says a person was asked), one of
    several ToolMessages answering the same call (the duplicate is the fault),
    and a tool a step's model call was given beyond the step's declared tools
    (the surplus, undeclared or given twice, is the fault: spec v1.2 requires
    them to be equal).
    """
    smaller: list[Bundle] = []
    for name in PARTS:
        part = getattr(bundle, name)
        if part is None:
            continue
        if name != "wait" or bundle.final_status in ("waiting", "complete"):
            smaller.append(replace(bundle, **{name: None}))
        for field in fields(part):
            value = getattr(part, field.name)
            if isinstance(value, tuple):
                smaller.extend(
                    replace(bundle, **{name: replace(part, **{field.name: value[:i] + value[i + 1 :]})})
                    for i in range(len(value))
                    if not _is_surplus(bundle, field.name, value, value[i])
                )
                smaller.append(replace(bundle, **{name: replace(part, **{field.name: ()})}))
            elif value is not None:
                smaller.append(replace(bundle, **{name: replace(part, **{field.name: None})}))
    return smaller


def _is_surplus(bundle: Bundle, field: str, values: tuple, entry: str) -> bool:
    if field == "tool_message_ids":
        return values.count(entry) > 1
    if field == "tools" and bundle.created is not None:
        declared = CONTRACTS.step_tools(bundle.created.route_version, bundle.created.receiver)
        return declared is not None and (entry not in declared or values.count(entry) > 1)
    return False


@settings(max_examples=200, deadline=None)
@given(bundles)
def test_removing_evidence_never_turns_a_finding_healthy(bundle: Bundle) -> None:
    if classify(bundle, CONTRACTS, NOW).verdict == "HEALTHY":
        return

    # Every single removal is checked: there are only a few dozen and classify is cheap.
    healed = [less for less in _removals(bundle) if classify(less, CONTRACTS, NOW).verdict == "HEALTHY"]

    assert healed == []


@pytest.mark.parametrize("surplus", ["quote_price", "refund"])
def test_a_step_given_a_tool_beyond_its_declared_ones_fails_at_its_destination(surplus: str) -> None:
    # The examples hypothesis found for the exception above: a tool given twice, or one not declared.
    data = stepped()
    data["destination"]["tools"] = sorted([*data["destination"]["tools"], surplus])
    bundle = parse_bundle(data)

    assert classify(bundle, CONTRACTS, NOW).boundary == "destination"
    assert classify(_with_healthy_destination(bundle), CONTRACTS, NOW).verdict == "HEALTHY"


def test_removing_a_wait_receipt_while_running_is_the_documented_exception() -> None:
    data = paused()
    data["wait"]["owner"] = None
    data["final_status"] = "running"
    bundle = parse_bundle(data)

    assert classify(bundle, CONTRACTS, NOW).verdict == "UNCERTAIN"
    assert classify(replace(bundle, wait=None), CONTRACTS, NOW).verdict == "HEALTHY"


# --- (c) total and deterministic --------------------------------------------


def _assert_well_formed(verdict: Verdict) -> None:
    assert verdict.verdict in VERDICTS
    assert verdict.boundary == VERDICT_BOUNDARY[verdict.verdict]
    assert verdict.next_move == NEXT_MOVES[verdict.verdict]
    assert tuple(verdict.boundaries) == BOUNDARIES
    statuses = list(verdict.boundaries.values())
    if verdict.boundary is None:
        assert set(statuses) <= {"pass", "not_applicable"}
        return
    decided = BOUNDARIES.index(verdict.boundary)
    assert set(statuses[:decided]) <= {"pass", "not_applicable"}
    assert statuses[decided] == ("waiting" if verdict.verdict == "WAITING_ON_APPROVAL" else "fail")
    assert set(statuses[decided + 1 :]) <= {"not_reached"}


@settings(max_examples=200, deadline=None)
@given(bundle=bundles, now=st.datetimes(timezones=zones))
def test_classify_is_deterministic_and_answers_every_perturbed_bundle(bundle: Bundle, now: datetime) -> None:
    first = classify(bundle, CONTRACTS, now)

    assert classify(copy.deepcopy(bundle), CONTRACTS, now) == first
    _assert_well_formed(first)


aware_times = st.none() | st.datetimes(timezones=st.just(UTC))
short_text = st.none() | st.sampled_from([*NAMES, "", "call_abc", "routes/1"]) | st.text(max_size=4)
maybe_bools = st.none() | st.booleans()
text_tuples = st.lists(st.sampled_from([*KEYS, "call_abc", ""]), max_size=4).map(tuple)
any_bundles = st.builds(
    Bundle,
    handoff_id=st.just("h-1"),
    operation_id=st.just("op-1"),
    created=st.none() | st.builds(Created, short_text, short_text, short_text, short_text, text_tuples, aware_times),
    reduced=st.none()
    | st.builds(Reduced, short_text, short_text, short_text, short_text, text_tuples, text_tuples, aware_times),
    destination=st.none() | st.builds(Destination, short_text, aware_times, short_text, st.none() | text_tuples),
    wait=st.none() | st.builds(Wait, short_text, short_text, aware_times, short_text, maybe_bools, maybe_bools),
    verification=st.none() | st.builds(Verification, short_text, st.sampled_from([None, "pass", "fail"]), aware_times),
    final_status=st.none() | st.sampled_from(FINAL_STATUSES),
)
any_contracts = st.builds(
    Contracts,
    wait_reasons=st.frozensets(st.sampled_from(["purchase_approval", "curiosity"])),
    routes=st.dictionaries(
        st.sampled_from(["routes/1", "routes/2"]),
        st.dictionaries(st.sampled_from(NAMES), st.dictionaries(st.sampled_from(NAMES), text_tuples)),
    ),
    steps=st.dictionaries(
        st.sampled_from(["routes/1", "routes/2"]),
        st.builds(StepRules, st.just("current_step"), st.dictionaries(st.sampled_from(NAMES), text_tuples)),
    ),
)


@settings(max_examples=200, deadline=None)
@given(bundle=any_bundles, contracts=any_contracts, now=st.datetimes(timezones=zones))
def test_classify_answers_any_bundle_and_contracts_the_types_allow(
    bundle: Bundle, contracts: Contracts, now: datetime
) -> None:
    first = classify(bundle, contracts, now)

    assert classify(bundle, contracts, now) == first
    _assert_well_formed(first)


# --- (d) the interchange format round-trips ---------------------------------


@settings(max_examples=200, deadline=None)
@given(bundle_dicts)
def test_a_parsed_bundle_survives_a_round_trip_through_its_dict(data: dict) -> None:
    bundle = parse_bundle(data)

    assert parse_bundle(bundle_to_dict(bundle)) == bundle
