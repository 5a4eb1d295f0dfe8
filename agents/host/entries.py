"""The registered graphs: which graphs a hosted run can drive, in the langgraph.json convention.

`settings.SIDEWISP_GRAPHS` (the environment variable of the same name) is a
JSON object, or the path of a langgraph.json-style file (`{"graphs": {...}}`,
paths inside it relative to the file). Each entry maps a name to a reference,
`path/to/file.py:attr` or `package.module:attr`, or to an object::

    {"graph": "<ref>", "verifier": "<ref>", "contracts": "path/to/contracts.json",
     "wait_policies": {"<tool>": {"owner": "...", "reason": "...", "deadline_minutes": 60}}}

`attr` is a compiled graph (Sidewisp gives it its checkpointer) or a factory
called with the RunnableConfig and, when its signature takes them,
`checkpointer=` and `host=` (an `agents.host.registry.Host`). A factory returns a compiled graph or a
`HostedGraph`. A worker process calls a factory once per graph, variant
(`configurable` keys other than the thread and the operation), dry run and
pinned limits version, and gives the compiled graph to every such run with the
run's own checkpointer and config (agents.host.graphcache): a factory must not bake
the config's thread or operation id into its graph; one that reads `host.run`
or makes the run's workspace is called for every run. The module of `attr`
may describe the graph for the admin (`sidewisp_description =
GraphDescription(...)`): its agents and tools, which tools are sensitive or
have effects, and named variants (the demo's scenarios). A graph ships its route contract
(spec §2) in the entry's `contracts` (a JSON file's path, or the document) or as its
module's `sidewisp_contracts` (the document, or a JSON file's path beside the module);
agents.host.shipped adds it to the database before the graph's first run.

Without configuration the demo team is registered as "demo". A bad entry
raises `ImproperlyConfigured` naming the entry, at start-up (AgentsConfig.ready).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from sidewisp_agent import Verifier, WaitPolicy
from sidewisp_agent.evidence import digest

from agents.host import graphcache
from agents.host.graphs import GraphDescription, HostedGraph
from receipts.verdicts import bundle

if TYPE_CHECKING:
    from agents.host.registry import Host

DEFAULT_GRAPHS: dict[str, Any] = {"demo": "agents.demo.graph:make_graph"}
DESCRIPTION_ATTR = "sidewisp_description"
CONTRACTS_ATTR = "sidewisp_contracts"
_ENTRY_KEYS = frozenset({"graph", "verifier", "wait_policies", "contracts"})
_POLICY_KEYS = frozenset({"owner", "reason", "deadline_minutes"})


@dataclass(frozen=True)
class Entry:
    """One registered graph: its name, where it comes from, and what its configuration adds."""

    name: str
    ref: str
    target: Any
    verifier: Verifier | None = None
    wait_policies: Mapping[str, WaitPolicy] = field(default_factory=dict)
    description: GraphDescription = field(default_factory=GraphDescription)
    # The spec §2 document the graph ships (validated at start-up), and where it was named.
    contracts: Mapping[str, Any] | None = None
    contracts_from: str = ""

    def build(self, config: Mapping[str, Any], *, checkpointer: Any, host: Host) -> HostedGraph:
        """The compiled graph on `checkpointer`, with wait policies (limits < factory < configuration).

        A factory's result is kept for the next run of the same variant and pinned limits version
        (agents.host.graphcache); a compiled graph is only copied onto the checkpointer.
        """
        if is_compiled_graph(self.target):
            return self._hosted(self.target.copy(update={"checkpointer": checkpointer}), host)
        return graphcache.hosted_graph(self, config, host, checkpointer, lambda: self._made(config, checkpointer, host))

    def _made(self, config: Mapping[str, Any], checkpointer: Any, host: Host) -> HostedGraph:
        built = self.target(config, **_accepted_kwargs(self.target, checkpointer=checkpointer, host=host))
        return self._hosted(built, host)

    def _hosted(self, built: Any, host: Host) -> HostedGraph:
        if not isinstance(built, HostedGraph):
            built = HostedGraph(built)
        if not is_compiled_graph(built.graph):
            msg = f"graph {self.name!r} ({self.ref}): the factory returned {type(built.graph).__name__}, not a graph"
            raise TypeError(msg)
        policies = {**host.wait_policies, **built.wait_policies, **self.wait_policies}
        return HostedGraph(built.graph, wait_policies=policies, verifier=built.verifier or self.verifier)


# --- reading the setting ------------------------------------------------------------


def graphs() -> dict[str, Entry]:
    """The registered graphs by name (loaded once per process, again when the setting changes)."""
    return _load(setting_key())


def entry(name: str) -> Entry:
    found = graphs().get(name)
    if found is None:
        msg = f"unknown graph {name!r}; registered: {', '.join(sorted(graphs())) or 'none'}"
        raise LookupError(msg)
    return found


def descriptions() -> list[GraphDescription]:
    return [e.description for e in graphs().values()]


def description(name: str) -> GraphDescription | None:
    found = graphs().get(name)
    return found.description if found is not None else None


def is_compiled_graph(value: Any) -> bool:
    from langgraph.pregel import Pregel

    return isinstance(value, Pregel)


def load(setting: Any, *, base_dir: Path | None = None) -> dict[str, Entry]:
    """Every entry of a SIDEWISP_GRAPHS value, or ImproperlyConfigured naming the first bad one."""
    base_dir = Path(base_dir or settings.BASE_DIR)
    graphs_, base_dir = _entries_of(setting, base_dir)
    return {str(name): _entry(str(name), spec, base_dir) for name, spec in graphs_.items()}


def setting_key() -> str:
    value = getattr(settings, "SIDEWISP_GRAPHS", "")
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


@cache
def _load(key: str) -> dict[str, Entry]:
    return load(key)


@receiver(setting_changed)
def _forget(setting: str, **kwargs: Any) -> None:
    if setting == "SIDEWISP_GRAPHS":
        _load.cache_clear()
        graphcache.forget()


def _entries_of(setting: Any, base_dir: Path) -> tuple[Mapping[str, Any], Path]:
    if setting is None or (isinstance(setting, str) and not setting.strip()):
        return DEFAULT_GRAPHS, base_dir
    if isinstance(setting, str) and setting.strip().startswith("{"):
        try:
            setting = json.loads(setting)
        except json.JSONDecodeError as exc:
            msg = f"SIDEWISP_GRAPHS is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
            raise ImproperlyConfigured(msg) from None
    if isinstance(setting, str | Path):
        path = Path(setting)
        path = path if path.is_absolute() else base_dir / path
        try:
            document = json.loads(path.read_text())
        except OSError:
            msg = f"SIDEWISP_GRAPHS: no such file {str(setting)!r}"
            raise ImproperlyConfigured(msg) from None
        except json.JSONDecodeError as exc:
            msg = f"SIDEWISP_GRAPHS file {str(setting)!r} is not valid JSON ({exc.msg} at line {exc.lineno})"
            raise ImproperlyConfigured(msg) from None
        if not isinstance(document, Mapping) or not isinstance(document.get("graphs"), Mapping):
            msg = f'SIDEWISP_GRAPHS file {str(setting)!r} needs a "graphs" object, as langgraph.json has'
            raise ImproperlyConfigured(msg)
        return document["graphs"], path.parent
    if not isinstance(setting, Mapping):
        msg = "SIDEWISP_GRAPHS must be a JSON object of name → graph, or the path of a langgraph.json file"
        raise ImproperlyConfigured(msg)
    return setting, base_dir


def _entry(name: str, spec: Any, base_dir: Path) -> Entry:
    where = f"SIDEWISP_GRAPHS entry {name!r}"
    if isinstance(spec, str):
        spec = {"graph": spec}
    if not isinstance(spec, Mapping):
        msg = f'{where}: must be "path/to/file.py:attr", "package.module:attr" or an object with "graph"'
        raise ImproperlyConfigured(msg)
    if unknown := set(spec) - _ENTRY_KEYS:
        msg = f"{where}: unknown key {', '.join(sorted(map(str, unknown)))}; allowed: {', '.join(sorted(_ENTRY_KEYS))}"
        raise ImproperlyConfigured(msg)
    ref = spec.get("graph")
    module, target = _resolve(ref, base_dir, f"{where} graph")
    if not (is_compiled_graph(target) or callable(target)):
        msg = f"{where}: {ref} is {type(target).__name__}, neither a compiled graph nor a factory"
        raise ImproperlyConfigured(msg)
    verifier = None
    if spec.get("verifier") is not None:
        _, check = _resolve(spec["verifier"], base_dir, f"{where} verifier")
        if not callable(check):
            msg = f"{where} verifier: {spec['verifier']} is not callable"
            raise ImproperlyConfigured(msg)
        verifier = as_verifier(check, name=spec["verifier"].rsplit(":", 1)[-1])
    described = getattr(module, DESCRIPTION_ATTR, None)
    if described is not None and not isinstance(described, GraphDescription):
        msg = f"{where}: {DESCRIPTION_ATTR} of {ref} must be a GraphDescription"
        raise ImproperlyConfigured(msg)
    shipped, shipped_from = _shipped_contracts(spec.get("contracts"), module, base_dir, where)
    return Entry(
        name=name,
        ref=ref,
        target=target,
        verifier=verifier,
        wait_policies=_wait_policies(spec.get("wait_policies"), where),
        description=described or GraphDescription(),
        contracts=shipped,
        contracts_from=shipped_from,
    )


def _shipped_contracts(named: Any, module: Any, base_dir: Path, where: str) -> tuple[Mapping | None, str]:
    """The contracts document the entry (else the graph's module) ships, validated, and where it was named."""
    if named is not None:
        origin, value, relative_to = f"{where} contracts", named, base_dir
    elif getattr(module, CONTRACTS_ATTR, None) is not None:
        origin, value = f"{where}: {CONTRACTS_ATTR} of its module", getattr(module, CONTRACTS_ATTR)
        relative_to = Path(module.__file__).parent if getattr(module, "__file__", None) else base_dir
    else:
        return None, ""
    if isinstance(value, str | Path):
        path = Path(value) if Path(value).is_absolute() else relative_to / value
        try:
            value = json.loads(path.read_text())
        except OSError:
            msg = f"{origin}: no such file {str(value)!r}"
            raise ImproperlyConfigured(msg) from None
        except json.JSONDecodeError as exc:
            msg = f"{origin}: {str(value)!r} is not valid JSON ({exc.msg} at line {exc.lineno})"
            raise ImproperlyConfigured(msg) from None
    try:
        bundle.parse_contracts(value)
    except bundle.BundleError as exc:
        msg = f"{origin}: {exc}"
        raise ImproperlyConfigured(msg) from None
    return value, origin


def _resolve(ref: Any, base_dir: Path, where: str) -> tuple[Any, Any]:
    if not isinstance(ref, str) or ref.count(":") != 1 or not all(ref.split(":")):
        msg = f'{where}: {ref!r} is not "path/to/file.py:attr" or "package.module:attr"'
        raise ImproperlyConfigured(msg)
    location, attr = ref.split(":")
    if location.endswith(".py") or "/" in location:
        path = Path(location)
        path = path if path.is_absolute() else base_dir / path
        if not path.is_file():
            msg = f"{where}: no such file {location!r}"
            raise ImproperlyConfigured(msg)
        module = _import_file(path)
    else:
        try:
            module = importlib.import_module(location)
        except ModuleNotFoundError as exc:
            msg = f"{where}: no module {location!r} ({exc.name} not found)"
            raise ImproperlyConfigured(msg) from None
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            msg = f"{where}: {location} has no attribute {attr!r}"
            raise ImproperlyConfigured(msg)
        target = getattr(target, part)
    return module, target


def _import_file(path: Path) -> Any:
    resolved = path.resolve()
    name = f"sidewisp_graph_{resolved.stem}_{hashlib.sha256(str(resolved).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _wait_policies(raw: Any, where: str) -> dict[str, WaitPolicy]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        msg = f"{where} wait_policies: must be an object of tool name → {{owner, reason, deadline_minutes}}"
        raise ImproperlyConfigured(msg)
    policies = {}
    for tool, policy in raw.items():
        at = f"{where} wait_policies.{tool}"
        if not isinstance(policy, Mapping) or set(policy) - _POLICY_KEYS:
            msg = f"{at}: must be an object with owner, reason and deadline_minutes (and nothing else)"
            raise ImproperlyConfigured(msg)
        minutes = policy.get("deadline_minutes")
        if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int) or minutes < 1):
            msg = f"{at}.deadline_minutes: must be a whole number of minutes ≥ 1"
            raise ImproperlyConfigured(msg)
        policies[str(tool)] = WaitPolicy(
            owner=policy.get("owner") or None, reason=policy.get("reason") or None, deadline_minutes=minutes
        )
    return policies


def as_verifier(check: Callable[[str], Any], *, name: str) -> Verifier:
    """An outcome check in the observer's shape: one returning a bool is wrapped with a receipt id."""

    def run(operation_id: str) -> tuple[str, str, str] | None:
        found = check(operation_id)
        if found is None or isinstance(found, tuple):
            return found
        result = "pass" if found else "fail"
        return name, result, f"v-{digest(name, operation_id, result)}"

    return run


def _accepted_kwargs(factory: Callable, **offered: Any) -> dict[str, Any]:
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return offered
    return {key: value for key, value in offered.items() if key in parameters}
