"""The `sidewisp.handoff/1` interchange format: parse, minimize, serialize.

Plain Python with no Django import (a test enforces it), so the recording
service, the replay command and the classifier share one reading of the spec.

Parsing fails closed: a present field of the wrong shape is a `BundleError`
naming the field, while a missing field is simply missing evidence for the
classifier to judge. Unknown fields are dropped without being looked at, and no
error message ever repeats the value it rejects.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import UTC, datetime
from types import MappingProxyType

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

MAX_STRING_LENGTH = 200
MAX_LIST_ENTRIES = 100

# Cc covers ASCII/C1 controls and newlines; Zl/Zp are Unicode line breaks; Cf
# holds invisible bidi overrides that would make an id display as another id;
# Cs (lone surrogates) cannot be stored as UTF-8.
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# An absolute local path anywhere in the text: a slash or backslash that does not
# continue a relative name (`routes/1`, `./x` pass; `/etc`, `see /srv/a`, `x=/var`,
# `\\server` and `https://` fail), a home directory (`~/`, `~root`, `$HOME`), a
# drive letter and a `file:` URL.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])[/\\~]|[A-Za-z]:[/\\]|\bfile:|\$\{?HOME\b", re.IGNORECASE)
# Values shaped like credentials: provider key prefixes, bearer tokens and
# `password=`-style assignments. Long random runs are judged by _random_run.
_SECRET = re.compile(
    r"(?<![A-Za-z0-9])(?:sk|rk)[-_][A-Za-z0-9_-]{8,}"  # OpenAI, Anthropic, Stripe secret and restricted keys
    r"|\b(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{8,}"  # GitHub tokens
    r"|(?<![A-Z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[A-Z0-9]{12,}"  # AWS access key ids
    r"|\bxox[a-z]-[A-Za-z0-9-]+|\bxapp-[A-Za-z0-9-]+"  # Slack
    r"|\bAIza[A-Za-z0-9_-]{20,}"  # Google API keys
    r"|\beyJ[A-Za-z0-9_-]{10,}"  # JSON web tokens (base64 of `{"`)
    r"|-----BEGIN"  # PEM blocks
    r"|(?i:\bbearer\s+\S)"
    r"|(?i:\b(?:password|passwd|pwd|secret|client_secret|api[_-]?key|access[_-]?key|token|access[_-]?token)\s*[=:])"
)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_TOKEN_RUN = re.compile(r"[A-Za-z0-9+/_=-]{32,}")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{40,}")
# Shannon entropy in bits per character: random base62 runs of 32 characters
# score about 4.5 (rarely under 4.2), identifiers and English words under 4.
_RANDOM_RUN_BITS = 4.2

# Extended ISO 8601 with a mandatory zone. fromisoformat alone would also take
# any separator character and naive times.
_ISO_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?(?:Z|[+-]\d{2}(?::?\d{2})?)",
    re.ASCII,
)
_TIME_PROBLEM = "must be an ISO 8601 time with a time zone"


class BundleError(ValueError):
    """Input that is not a valid bundle, part or contracts document.

    `field` is a dotted path such as ``reduced.context_keys[2]``; `message`
    says what is wrong without repeating the rejected value.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Created:
    sender: str | None = None
    receiver: str | None = None
    route_version: str | None = None
    tool_call_id: str | None = None
    required_context_keys: tuple[str, ...] = ()
    at: datetime | None = None


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


@dataclass(frozen=True)
class StepRules:
    """A route version's single-agent steps (spec §2 v1.2): the step variable and each step's tools."""

    key: str
    # step -> the tool names its model call must be given
    tools: Mapping[str, tuple[str, ...]] = dataclass_field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True)
class Contracts:
    wait_reasons: frozenset[str]
    # version -> sender -> receiver -> required context key names
    routes: Mapping[str, Mapping[str, Mapping[str, tuple[str, ...]]]]
    # version -> its step variable and step tools (v1.2; most versions have none)
    steps: Mapping[str, StepRules] = dataclass_field(default_factory=lambda: MappingProxyType({}))

    def required_keys(self, version: str | None, sender: str | None, receiver: str | None) -> tuple[str, ...] | None:
        """The keys the route requires, or None when the route is not declared."""
        return self.routes.get(version, {}).get(sender, {}).get(receiver)

    def step_tools(self, version: str | None, step: str | None) -> tuple[str, ...] | None:
        """The tool names `step`'s model call must be given under `version`, or None when none are declared."""
        rules = self.steps.get(version)
        return None if rules is None else rules.tools.get(step)


# --- field values -----------------------------------------------------------


def text_problem(text: str) -> str | None:
    """Why `text` may not be stored, shown or announced, or None when it may.

    The one rule for every string that reaches a receipt, a middleware report,
    an event or a page: at most MAX_STRING_LENGTH characters, no control or
    bidi characters, no absolute local path anywhere in it, nothing shaped like
    a secret. Names, ids, ISO times and short digests (`call_abc123`,
    `h-7f3a09c1d2e4b5a6`, `routes/1`, a UUID) pass. The answer never repeats
    the text.
    """
    if len(text) > MAX_STRING_LENGTH:
        return f"is longer than {MAX_STRING_LENGTH} characters"
    if any(unicodedata.category(char) in _CONTROL_CATEGORIES for char in text):
        return "must not contain control characters"
    # Compatibility forms (a fullwidth solidus, ligatures) read like their ASCII twins on a page.
    folded = unicodedata.normalize("NFKC", text)
    if _ABSOLUTE_PATH.search(folded):
        return "must not contain an absolute local path"
    if _SECRET.search(folded) or _has_random_run(folded):
        return "must not contain a secret-shaped value"
    return None


def _has_random_run(text: str) -> bool:
    """A long hex run, or a long run mixing upper case, lower case and digits at random."""
    if _HEX_RUN.search(text):
        return True
    for run in _TOKEN_RUN.findall(_UUID.sub(" ", text)):
        mixed = any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run)
        if mixed and _bits_per_char(run) >= _RANDOM_RUN_BITS:
            return True
    return False


def _bits_per_char(run: str) -> float:
    counts = Counter(run)
    return -sum(n / len(run) * math.log2(n / len(run)) for n in counts.values())


def _parse_text(value: object, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BundleError(field, "must be a string")
    if problem := text_problem(value):
        raise BundleError(field, problem)
    return value


def _parse_required_text(value: object, field: str) -> str:
    if value is None:
        raise BundleError(field, "is required")
    text = _parse_text(value, field)
    if not text:
        raise BundleError(field, "must not be empty")
    return text


def _parse_names(value: object, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise BundleError(field, "must be a list of strings")
    if len(value) > MAX_LIST_ENTRIES:
        raise BundleError(field, f"has more than {MAX_LIST_ENTRIES} entries")
    names = []
    for index, item in enumerate(value):
        if item is None:
            raise BundleError(f"{field}[{index}]", "must be a string")
        names.append(_parse_text(item, f"{field}[{index}]"))
    return tuple(names)


def _to_utc(text: str) -> datetime | None:
    if not _ISO_TIME.fullmatch(text):
        return None
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except (ValueError, OverflowError):  # e.g. month 13, or a shift past year 1 or 9999
        return None


def parse_time(field: str, value: object) -> datetime:
    """An ISO 8601 time with a zone, as an aware UTC datetime; BundleError otherwise."""
    if not isinstance(value, str) or len(value) > MAX_STRING_LENGTH:
        raise BundleError(field, _TIME_PROBLEM)
    # Raised outside any `except` so no chained exception carries the raw text into logs.
    moment = _to_utc(value)
    if moment is None:
        raise BundleError(field, _TIME_PROBLEM)
    return moment


def _parse_optional_names(value: object, field: str) -> tuple[str, ...] | None:
    return None if value is None else _parse_names(value, field)


def _parse_optional_time(value: object, field: str) -> datetime | None:
    return None if value is None else parse_time(field, value)


def _parse_bool(value: object, field: str) -> bool | None:
    if value is None or type(value) is bool:
        return value
    raise BundleError(field, "must be true or false")


def _parse_result(value: object, field: str) -> str | None:
    if value is None or (isinstance(value, str) and value in RESULTS):
        return value
    raise BundleError(field, 'must be "pass" or "fail"')


def _parse_resolution(value: object, field: str) -> str | None:
    if value is None or (isinstance(value, str) and value in RESOLUTIONS):
        return value
    raise BundleError(field, f"must be one of {', '.join(RESOLUTIONS)}")


def format_time(moment: datetime) -> str:
    """ISO 8601 in UTC with a trailing Z, e.g. ``2026-07-30T10:00:00Z``."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


# --- parts ------------------------------------------------------------------

_Parser = Callable[[object, str], object]
_TEXT, _NAMES, _TIME, _BOOL, _RESULT, _RESOLUTION = "text", "names", "time", "bool", "result", "resolution"
_OPTIONAL_NAMES = "optional_names"  # a list whose absence is kept apart from an empty list
_PARSERS: dict[str, _Parser] = {
    _TEXT: _parse_text,
    _NAMES: _parse_names,
    _OPTIONAL_NAMES: _parse_optional_names,
    _TIME: _parse_optional_time,
    _BOOL: _parse_bool,
    _RESULT: _parse_result,
    _RESOLUTION: _parse_resolution,
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
# Fields added after v1 (v1.1 wait.resolution, v1.2 destination.tools): serialized only when present.
_LATER_FIELDS = frozenset({("wait", "resolution"), ("destination", "tools")})
_PART_TYPES: dict[str, type[Part]] = {
    "created": Created,
    "reduced": Reduced,
    "destination": Destination,
    "wait": Wait,
    "verification": Verification,
}
_PART_NAMES = {part_type: name for name, part_type in _PART_TYPES.items()}


def parse_part(name: str, value: object, *, field_prefix: str | None = None) -> Part:
    """Parse one part object on its own; error fields are `<field_prefix or name>.<field>`."""
    if name not in _PART_TYPES:
        raise BundleError("part", f"must be one of {', '.join(PARTS)}")
    prefix = name if field_prefix is None else field_prefix
    if not isinstance(value, Mapping):
        raise BundleError(prefix or name, "must be an object")
    parsed = {
        field: _PARSERS[kind](value.get(field), f"{prefix}.{field}" if prefix else field)
        for field, kind in _PART_FIELDS[name]
    }
    return _PART_TYPES[name](**parsed)


def part_to_dict(part: Part) -> dict[str, object]:
    """The part as a JSON-ready object with every known field (null when absent).

    Fields added in v1.1 and v1.2 appear only when present, so a v1 bundle serializes back to itself.
    """
    name = _PART_NAMES[type(part)]
    out: dict[str, object] = {}
    for field_name, kind in _PART_FIELDS[name]:
        value = getattr(part, field_name)
        if value is None and (name, field_name) in _LATER_FIELDS:
            continue
        if kind == _TIME and value is not None:
            value = format_time(value)
        elif kind in (_NAMES, _OPTIONAL_NAMES):
            value = list(value)
        out[field_name] = value
    return out


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
    have its documented type. Strings are at most 200 characters, hold no
    control characters, no absolute local path anywhere and nothing
    shaped like a secret (see `text_problem`); lists hold at most 100
    strings; times carry a zone and come back as aware UTC datetimes. Unknown
    fields are dropped. Anything else raises `BundleError` naming the field and
    never the value.
    """
    if not isinstance(value, Mapping):
        raise BundleError("bundle", "must be a JSON object")
    if value.get("schema") != SCHEMA:
        raise BundleError("schema", f'must be "{SCHEMA}"')
    handoff_id = _parse_required_text(value.get("handoff_id"), "handoff_id")
    operation_id = _parse_required_text(value.get("operation_id"), "operation_id")
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


# --- middleware reports and other minimized strings --------------------------

MAX_DETAIL_ENTRIES = 20


def parse_name(value: object, field: str) -> str:
    """A required, non-empty string that passes `text_problem`; BundleError naming `field` otherwise."""
    return _parse_required_text(value, field)


def parse_report_detail(value: object, field: str = "detail") -> dict[str, object]:
    """A middleware report's detail: names, codes and counts only.

    Contract: an object of at most MAX_DETAIL_ENTRIES entries whose keys are
    names and whose values are strings (held to `text_problem`), whole or
    finite numbers, booleans, null, or lists of those (at most
    MAX_LIST_ENTRIES). Anything else raises `BundleError` naming the key, and
    a key that cannot be named safely is reported as `field` alone.
    """
    if not isinstance(value, Mapping):
        raise BundleError(field, "must be an object")
    if len(value) > MAX_DETAIL_ENTRIES:
        raise BundleError(field, f"has more than {MAX_DETAIL_ENTRIES} entries")
    detail: dict[str, object] = {}
    for key, item in value.items():
        name = _parse_name_key(key, field, "key")
        if isinstance(item, list | tuple):
            if len(item) > MAX_LIST_ENTRIES:
                raise BundleError(f"{field}.{name}", f"has more than {MAX_LIST_ENTRIES} entries")
            detail[name] = [_parse_scalar(entry, f"{field}.{name}[{index}]") for index, entry in enumerate(item)]
        else:
            detail[name] = _parse_scalar(item, f"{field}.{name}")
    return detail


def _parse_scalar(value: object, field: str) -> object:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, str):
        return _parse_text(value, field)
    raise BundleError(field, "must be a name, a number, true, false or null")


# --- contracts --------------------------------------------------------------


def _parse_object(value: object, field: str) -> Mapping[object, object]:
    if value is None:
        raise BundleError(field, "is required")
    if not isinstance(value, Mapping):
        raise BundleError(field, "must be an object")
    return value


def _parse_name_key(key: object, field: str, what: str) -> str:
    """A mapping key that names a version, sender or receiver.

    The key itself becomes part of later error paths, so it is checked before
    it is ever echoed.
    """
    if not isinstance(key, str):
        raise BundleError(field, f"has a {what} name that is not a string")
    if not key:
        raise BundleError(field, f"has an empty {what} name")
    if problem := text_problem(key):
        raise BundleError(field, f"has a {what} name that {problem}")
    return key


def _parse_declared_names(value: object, field: str) -> tuple[str, ...]:
    if value is None:
        raise BundleError(field, "is required")
    names = _parse_names(value, field)
    for index, name in enumerate(names):
        if not name:
            raise BundleError(f"{field}[{index}]", "must not be empty")
    return names


def _parse_routes(value: object) -> Mapping[str, Mapping[str, Mapping[str, tuple[str, ...]]]]:
    versions = {}
    for version_key, senders_value in _parse_object(value, "routes").items():
        version = _parse_name_key(version_key, "routes", "version")
        senders = {}
        for sender_key, receivers_value in _parse_object(senders_value, f"routes.{version}").items():
            sender = _parse_name_key(sender_key, f"routes.{version}", "sender")
            receivers = {}
            for receiver_key, keys in _parse_object(receivers_value, f"routes.{version}.{sender}").items():
                receiver = _parse_name_key(receiver_key, f"routes.{version}.{sender}", "receiver")
                receivers[receiver] = _parse_declared_names(keys, f"routes.{version}.{sender}.{receiver}")
            senders[sender] = MappingProxyType(receivers)
        versions[version] = MappingProxyType(senders)
    return MappingProxyType(versions)


# The only fields of a steps entry: a misspelt one would silently switch its check off, so it fails.
_STEP_FIELDS = ("key", "tools")


def _parse_steps(value: object, routes: Mapping[str, object]) -> Mapping[str, StepRules]:
    if value is None:
        return MappingProxyType({})
    versions = {}
    for version_key, entry in _parse_object(value, "steps").items():
        version = _parse_name_key(version_key, "steps", "version")
        if version not in routes:
            raise BundleError(f"steps.{version}", "names a version that routes does not declare")
        versions[version] = _parse_step_rules(entry, f"steps.{version}")
    return MappingProxyType(versions)


def _parse_step_rules(value: object, field: str) -> StepRules:
    entry = _parse_object(value, field)
    for key in entry:
        name = _parse_name_key(key, field, "field")
        if name not in _STEP_FIELDS:
            raise BundleError(f"{field}.{name}", f"is not a known field ({', '.join(_STEP_FIELDS)})")
    step_key = _parse_required_text(entry.get("key"), f"{field}.key")
    tools = {}
    if entry.get("tools") is not None:
        for step_name, names in _parse_object(entry["tools"], f"{field}.tools").items():
            step = _parse_name_key(step_name, f"{field}.tools", "step")
            tools[step] = _parse_declared_names(names, f"{field}.tools.{step}")
    return StepRules(key=step_key, tools=MappingProxyType(tools))


def parse_contracts(value: object) -> Contracts:
    """Parse the spec §2 document; both `wait_reasons` and `routes` are required (may be empty).

    `steps` (v1.2) is optional: per route version that `routes` declares, an object with the step
    variable's name (`key`, required) and optional `tools` (step -> tool names); no other fields.
    """
    if not isinstance(value, Mapping):
        raise BundleError("contracts", "must be a JSON object")
    wait_reasons = frozenset(_parse_declared_names(value.get("wait_reasons"), "wait_reasons"))
    routes = _parse_routes(value.get("routes"))
    return Contracts(wait_reasons=wait_reasons, routes=routes, steps=_parse_steps(value.get("steps"), routes))


def steps_to_dict(rules: StepRules) -> dict[str, object]:
    """One version's steps entry as the spec §2 document holds it."""
    return {"key": rules.key, "tools": {step: list(names) for step, names in rules.tools.items()}}


def contracts_to_dict(contracts: Contracts) -> dict[str, object]:
    """The spec §2 document back, wait reasons sorted so equal contracts serialize equally.

    `steps` appears only when a version has steps, so a v1 document serializes back to itself.
    """
    out: dict[str, object] = {
        "wait_reasons": sorted(contracts.wait_reasons),
        "routes": {
            version: {
                sender: {receiver: list(keys) for receiver, keys in receivers.items()}
                for sender, receivers in senders.items()
            }
            for version, senders in contracts.routes.items()
        },
    }
    if contracts.steps:
        out["steps"] = {version: steps_to_dict(rules) for version, rules in contracts.steps.items()}
    return out
