"""The contracts document (spec §2): wait reasons, routes and steps, parsed and serialized.

Plain Python with no Django import, like the rest of the agent package (the server reads it as receipts.verdicts.X).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from types import MappingProxyType

from .fields import BundleError, parse_name_key, parse_names, parse_required_text


@dataclass(frozen=True)
class StepRules:
    """A route version's single-agent steps (spec §2 v1.2): the step variable and each step's tools."""

    key: str
    # step -> the tool names its model call must be given
    tools: Mapping[str, tuple[str, ...]] = dataclass_field(default_factory=lambda: MappingProxyType({}))
    # v1.3: the step an agent is in before its step variable is first set (None: not named)
    first: str | None = None


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


def _parse_object(value: object, field: str) -> Mapping[object, object]:
    if value is None:
        raise BundleError(field, "is required")
    if not isinstance(value, Mapping):
        raise BundleError(field, "must be an object")
    return value


def _parse_declared_names(value: object, field: str) -> tuple[str, ...]:
    if value is None:
        raise BundleError(field, "is required")
    names = parse_names(value, field)
    for index, name in enumerate(names):
        if not name:
            raise BundleError(f"{field}[{index}]", "must not be empty")
    return names


def _parse_routes(value: object) -> Mapping[str, Mapping[str, Mapping[str, tuple[str, ...]]]]:
    versions = {}
    for version_key, senders_value in _parse_object(value, "routes").items():
        version = parse_name_key(version_key, "routes", "version")
        senders = {}
        for sender_key, receivers_value in _parse_object(senders_value, f"routes.{version}").items():
            sender = parse_name_key(sender_key, f"routes.{version}", "sender")
            receivers = {}
            for receiver_key, keys in _parse_object(receivers_value, f"routes.{version}.{sender}").items():
                receiver = parse_name_key(receiver_key, f"routes.{version}.{sender}", "receiver")
                receivers[receiver] = _parse_declared_names(keys, f"routes.{version}.{sender}.{receiver}")
            senders[sender] = MappingProxyType(receivers)
        versions[version] = MappingProxyType(senders)
    return MappingProxyType(versions)


# The only fields of a steps entry: a misspelt one would silently switch its check off, so it fails.
_STEP_FIELDS = ("key", "first", "tools")


def _parse_steps(value: object, routes: Mapping[str, object]) -> Mapping[str, StepRules]:
    if value is None:
        return MappingProxyType({})
    versions = {}
    for version_key, entry in _parse_object(value, "steps").items():
        version = parse_name_key(version_key, "steps", "version")
        if version not in routes:
            raise BundleError(f"steps.{version}", "names a version that routes does not declare")
        versions[version] = _parse_step_rules(entry, f"steps.{version}")
    return MappingProxyType(versions)


def _parse_step_rules(value: object, field: str) -> StepRules:
    entry = _parse_object(value, field)
    for key in entry:
        name = parse_name_key(key, field, "field")
        if name not in _STEP_FIELDS:
            raise BundleError(f"{field}.{name}", f"is not a known field ({', '.join(_STEP_FIELDS)})")
    step_key = parse_required_text(entry.get("key"), f"{field}.key")
    first = None if entry.get("first") is None else parse_required_text(entry["first"], f"{field}.first")
    tools = {}
    if entry.get("tools") is not None:
        for step_name, names in _parse_object(entry["tools"], f"{field}.tools").items():
            step = parse_name_key(step_name, f"{field}.tools", "step")
            tools[step] = _parse_declared_names(names, f"{field}.tools.{step}")
    return StepRules(key=step_key, tools=MappingProxyType(tools), first=first)


def parse_contracts(value: object) -> Contracts:
    """Parse the spec §2 document; both `wait_reasons` and `routes` are required (may be empty).

    `steps` (v1.2) is optional: per route version that `routes` declares, an object with the step
    variable's name (`key`, required), optional `first` (v1.3: the step before the variable is set) and
    optional `tools` (step -> tool names); no other fields.
    """
    if not isinstance(value, Mapping):
        raise BundleError("contracts", "must be a JSON object")
    wait_reasons = frozenset(_parse_declared_names(value.get("wait_reasons"), "wait_reasons"))
    routes = _parse_routes(value.get("routes"))
    return Contracts(wait_reasons=wait_reasons, routes=routes, steps=_parse_steps(value.get("steps"), routes))


def steps_to_dict(rules: StepRules) -> dict[str, object]:
    """One version's steps entry as the spec §2 document holds it (`first` only when named)."""
    out: dict[str, object] = {"key": rules.key}
    if rules.first is not None:
        out["first"] = rules.first
    out["tools"] = {step: list(names) for step, names in rules.tools.items()}
    return out


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
