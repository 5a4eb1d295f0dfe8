"""The `sidewisp.handoff/1` interchange format: parse, minimize, serialize.

Plain Python with no Django import (a test enforces it), so the recording
service, the replay command and the classifier share one reading of the spec.

Parsing fails closed: a present field of the wrong shape is a `BundleError`
naming the field, while a missing field is simply missing evidence for the
classifier to judge. Unknown fields are dropped without being looked at, and no
error message ever repeats the value it rejects.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from datetime import datetime

# Field values and the contracts document live beside this module; re-exported: callers read `bundle.X`.
from .contracts import (  # noqa: F401
    Contracts,
    StepRules,
    contracts_to_dict,
    parse_contracts,
    steps_to_dict,
)
from .fields import (  # noqa: F401
    MAX_DETAIL_ENTRIES,
    MAX_LIST_ENTRIES,
    MAX_STRING_LENGTH,
    REDACTED_PREFIX,
    BundleError,
    format_time,
    identifier,
    identifier_problem,
    is_redacted,
    parse_bool,
    parse_identifier,
    parse_identifiers,
    parse_name,
    parse_names,
    parse_optional_identifiers,
    parse_optional_names,
    parse_optional_time,
    parse_report_detail,
    parse_required_identifier,
    parse_required_text,
    parse_text,
    parse_time,
    redacted,
    redacted_fields,
    text_problem,
)

SCHEMA = "sidewisp.handoff/1"
PARTS = ("created", "reduced", "destination", "wait", "verification")
FINAL_STATUSES = ("running", "waiting", "complete", "failed")
VERDICTS = (
    "HEALTHY",
    "ROUTE_REJECTED",
    "STALE_CONTROL",
    "OPEN_TOOL_PROTOCOL",
    "CONTEXT_INCOMPLETE",
    "DESTINATION_NOT_STARTED",
    "WAITING_ON_APPROVAL",
    "UNCERTAIN",
    "FALSE_COMPLETE",
)
RESULTS = ("pass", "fail")
# How a wait was decided (spec §1 v1.1); `expired` is the safe default applied at the deadline.
RESOLUTIONS = ("approved", "edited", "rejected", "expired", "cancelled")
# Where a created receipt's route version came from: SidewispMiddleware(route_version=),
# observe(route_version=), or neither (the default, routes/1). Reasons name it.
ROUTE_VERSION_SOURCES = ("middleware", "observe", "default")


@dataclass(frozen=True)
class Created:
    sender: str | None = None
    receiver: str | None = None
    route_version: str | None = None
    tool_call_id: str | None = None
    required_context_keys: tuple[str, ...] = ()
    at: datetime | None = None
    # v1.3 the whole turn: every tool-call id of the AI message that made the transfer, its own included;
    # None when not recorded (an older agent side), when only the transfer's own call is checked.
    turn_tool_call_ids: tuple[str, ...] | None = None
    route_version_source: str | None = None


@dataclass(frozen=True)
class Reduced:
    goto: str | None = None
    active_agent_before: str | None = None
    active_agent_after: str | None = None
    graph_scope: str | None = None
    tool_message_ids: tuple[str, ...] = ()
    context_keys: tuple[str, ...] = ()
    at: datetime | None = None


@dataclass(frozen=True)
class Destination:
    node_id: str | None = None
    started_at: datetime | None = None
    attempt_id: str | None = None
    # v1.2 steps of one agent: the sorted names of the tools the step's model call was given; None when
    # not recorded (which is not the same as a model call given no tools).
    tools: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Wait:
    owner: str | None = None
    reason: str | None = None
    deadline_utc: datetime | None = None
    resume_token_id: str | None = None
    state_persisted: bool | None = None
    resolved: bool | None = None
    resolution: str | None = None


@dataclass(frozen=True)
class Verification:
    verifier: str | None = None
    result: str | None = None
    checked_at: datetime | None = None
    receipt_id: str | None = None


Part = Created | Reduced | Destination | Wait | Verification


@dataclass(frozen=True)
class Bundle:
    handoff_id: str
    operation_id: str
    created: Created | None = None
    reduced: Reduced | None = None
    destination: Destination | None = None
    wait: Wait | None = None
    verification: Verification | None = None
    final_status: str | None = None
    expect: str | None = None


def _parse_result(value: object, field: str) -> str | None:
    if value is None or (isinstance(value, str) and value in RESULTS):
        return value
    raise BundleError(field, 'must be "pass" or "fail"')


def _parse_source(value: object, field: str) -> str | None:
    if value is None or (isinstance(value, str) and value in ROUTE_VERSION_SOURCES):
        return value
    raise BundleError(field, f"must be one of {', '.join(ROUTE_VERSION_SOURCES)}")


def _parse_resolution(value: object, field: str) -> str | None:
    if value is None or (isinstance(value, str) and value in RESOLUTIONS):
        return value
    raise BundleError(field, f"must be one of {', '.join(RESOLUTIONS)}")


# --- parts ------------------------------------------------------------------

_Parser = Callable[[object, str], object]
_TEXT, _NAMES, _TIME, _BOOL, _RESULT, _RESOLUTION = "text", "names", "time", "bool", "result", "resolution"
_OPTIONAL_NAMES = "optional_names"  # a list whose absence is kept apart from an empty list
_SOURCE = "route_version_source"
# Every string of a part is an id or a name (spec v1.3): kept, or redacted when refused, never an error.
_PARSERS: dict[str, _Parser] = {
    _TEXT: parse_identifier,
    _NAMES: parse_identifiers,
    _OPTIONAL_NAMES: parse_optional_identifiers,
    _TIME: parse_optional_time,
    _BOOL: parse_bool,
    _RESULT: _parse_result,
    _RESOLUTION: _parse_resolution,
    _SOURCE: _parse_source,
}
# The only fields a part may carry; everything else is dropped unread.
_PART_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "created": (
        ("sender", _TEXT),
        ("receiver", _TEXT),
        ("route_version", _TEXT),
        ("tool_call_id", _TEXT),
        ("required_context_keys", _NAMES),
        ("at", _TIME),
        ("turn_tool_call_ids", _OPTIONAL_NAMES),
        ("route_version_source", _SOURCE),
    ),
    "reduced": (
        ("goto", _TEXT),
        ("active_agent_before", _TEXT),
        ("active_agent_after", _TEXT),
        ("graph_scope", _TEXT),
        ("tool_message_ids", _NAMES),
        ("context_keys", _NAMES),
        ("at", _TIME),
    ),
    "destination": (("node_id", _TEXT), ("started_at", _TIME), ("attempt_id", _TEXT), ("tools", _OPTIONAL_NAMES)),
    "wait": (
        ("owner", _TEXT),
        ("reason", _TEXT),
        ("deadline_utc", _TIME),
        ("resume_token_id", _TEXT),
        ("state_persisted", _BOOL),
        ("resolved", _BOOL),
        ("resolution", _RESOLUTION),
    ),
    "verification": (("verifier", _TEXT), ("result", _RESULT), ("checked_at", _TIME), ("receipt_id", _TEXT)),
}
# Fields added after v1 (v1.1 wait.resolution, v1.2 destination.tools, v1.3 created.turn_tool_call_ids and
# created.route_version_source): serialized only when present.
_LATER_FIELDS = frozenset(
    {
        ("wait", "resolution"),
        ("destination", "tools"),
        ("created", "turn_tool_call_ids"),
        ("created", "route_version_source"),
    }
)
_PART_TYPES: dict[str, type[Part]] = {
    "created": Created,
    "reduced": Reduced,
    "destination": Destination,
    "wait": Wait,
    "verification": Verification,
}
_PART_NAMES = {part_type: name for name, part_type in _PART_TYPES.items()}


# Each part's fields with their parsers and error fields under the part's own name, in the part's field order:
# a part is parsed once per receipt recorded, and built by position (keywords cost twice as much).
_PARSE_PLANS = {
    name: tuple((field, _PARSERS[kind], f"{name}.{field}") for field, kind in part_fields)
    for name, part_fields in _PART_FIELDS.items()
}
assert all(
    [field.name for field in dataclass_fields(_PART_TYPES[name])] == [field for field, _ in part_fields]
    for name, part_fields in _PART_FIELDS.items()
)


def by_position(cls: type) -> Callable[..., object]:
    """A function making `cls` (a frozen dataclass with no `__post_init__`) from every field's value, in field
    order: what its constructor makes, without its `object.__setattr__` per field (a part and a bundle are made
    per receipt recorded, where the constructor cost three times as much)."""
    names, new = tuple(field.name for field in dataclass_fields(cls)), object.__new__
    assert not hasattr(cls, "__post_init__")

    def make(*values: object) -> object:
        made = new(cls)
        made.__dict__.update(zip(names, values, strict=True))  # every field's value: ValueError else
        return made

    return make


_PART_MAKERS = {name: by_position(part_type) for name, part_type in _PART_TYPES.items()}


def parse_part(name: str, value: object, *, field_prefix: str | None = None) -> Part:
    """Parse one part object on its own; error fields are `<field_prefix or name>.<field>`."""
    plan = _PARSE_PLANS.get(name)
    if plan is None:
        raise BundleError("part", f"must be one of {', '.join(PARTS)}")
    prefix = name if field_prefix is None else field_prefix
    if not isinstance(value, Mapping):
        raise BundleError(prefix or name, "must be an object")
    get = value.get
    if prefix == name:
        return _PART_MAKERS[name](*[parse(get(field), where) for field, parse, where in plan])
    return _PART_MAKERS[name](
        *[parse(get(field), f"{prefix}.{field}" if prefix else field) for field, parse, _ in plan]
    )


def part_to_dict(part: Part) -> dict[str, object]:
    """The part as a JSON-ready object with every known field (null when absent).

    Fields added in v1.1, v1.2 and v1.3 appear only when present, so a v1 bundle serializes back to itself.
    """
    out: dict[str, object] = {}
    for field_name, convert, later in _DICT_PLANS[type(part)]:
        value = getattr(part, field_name)
        if value is None:
            if not later:
                out[field_name] = None
        else:
            out[field_name] = value if convert is None else convert(value)
    return out


# Each part type's fields for `part_to_dict`, in order: (field, how its value is written or None, added later).
_DICT_PLANS = {
    _PART_TYPES[name]: tuple(
        (
            field,
            format_time if kind == _TIME else list if kind in (_NAMES, _OPTIONAL_NAMES) else None,
            (name, field) in _LATER_FIELDS,
        )
        for field, kind in part_fields
    )
    for name, part_fields in _PART_FIELDS.items()
}


# --- bundles ----------------------------------------------------------------


def parse_final_status(value: object) -> str | None:
    """The agent side's claimed status, or None when it made no claim."""
    if value is None or (isinstance(value, str) and value in FINAL_STATUSES):
        return value
    raise BundleError("final_status", f"must be one of {', '.join(FINAL_STATUSES)}")


def _parse_expect(value: object) -> str | None:
    if value is None or (isinstance(value, str) and value in VERDICTS):
        return value
    raise BundleError("expect", f"must be one of {', '.join(VERDICTS)}")


def parse_bundle(value: object) -> Bundle:
    """Parse and minimize one decoded `sidewisp.handoff/1` object.

    Contract: the top level is an object whose `schema` is SCHEMA and whose
    `handoff_id` and `operation_id` are non-empty strings. Every part, every
    field inside a part, `final_status` and `expect` may be absent or null
    (absent evidence is for the classifier to judge), but when present must
    have its documented type. Every string is an id or a name: one that
    `identifier_problem` refuses (over 200 characters, control characters,
    an absolute local path, a known credential shape) is replaced by its
    `redacted` form, never an error (spec v1.3); lists hold at most 100
    strings; times carry a zone and come back as aware UTC datetimes. Unknown
    fields are dropped. Anything else raises `BundleError` naming the field and
    never the value.
    """
    if not isinstance(value, Mapping):
        raise BundleError("bundle", "must be a JSON object")
    if value.get("schema") != SCHEMA:
        raise BundleError("schema", f'must be "{SCHEMA}"')
    handoff_id = parse_required_identifier(value.get("handoff_id"), "handoff_id")
    operation_id = parse_required_identifier(value.get("operation_id"), "operation_id")
    parts = {name: None if value.get(name) is None else parse_part(name, value[name]) for name in PARTS}
    return Bundle(
        handoff_id=handoff_id,
        operation_id=operation_id,
        **parts,
        final_status=parse_final_status(value.get("final_status")),
        expect=_parse_expect(value.get("expect")),
    )


def bundle_to_dict(bundle: Bundle) -> dict[str, object]:
    """The interchange object back: known fields only, absent parts and `expect` omitted."""
    out: dict[str, object] = {
        "schema": SCHEMA,
        "handoff_id": bundle.handoff_id,
        "operation_id": bundle.operation_id,
    }
    for name in PARTS:
        part = getattr(bundle, name)
        if part is not None:
            out[name] = part_to_dict(part)
    out["final_status"] = bundle.final_status
    if bundle.expect is not None:
        out["expect"] = bundle.expect
    return out
