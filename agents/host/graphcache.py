"""Hosted graphs built once per worker process: a factory's result kept per pinned limits version.

Building the demo team was ~130 ms of a 0.35 s run (and a new graph object
pays LangChain's lazy first-invoke work again), while a compiled LangGraph
graph is reusable across threads and runs (each run brings its own
checkpointer and config). So a factory's `HostedGraph` is kept per graph,
variant (the configurable keys other than the thread and the operation),
dry run and reading, and used again while the run's pinned limits version is
the same; a run pinned to another version builds it again and replaces it.

Not kept: a build without a pinned version (it would follow "current"), one
whose factory read the run (`Host.run`, `Host.operation_id`) or made its
workspace, and one with a subgraph compiled on the run's checkpointer (it
could not be given the next run's): those are the run's own.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.host.graphs import HostedGraph

if TYPE_CHECKING:
    from agents.host.entries import Entry
    from agents.host.registry import Host

# The configurable keys that name one run, never a variant of its graph.
RUN_KEYS = frozenset({"thread_id", "operation_id", "checkpoint_id", "checkpoint_ns", "checkpoint_map"})


@dataclass(frozen=True)
class Kept:
    limits: str  # the pinned version's number and the digest of its document
    hosted: HostedGraph  # compiled without a checkpointer; each run copies it onto its own


_kept: dict[tuple, Kept] = {}
_lock = threading.Lock()


def hosted_graph(
    entry: Entry, config: Mapping[str, Any], host: Host, checkpointer: Any, build: Callable[[], HostedGraph]
) -> HostedGraph:
    """The entry's graph for this run on `checkpointer`: the kept one when its limits match, else `build()`."""
    limits = limits_key(host)
    key = (entry.name, entry.ref, variant(config), host.dry_run, host.reading)
    kept = _kept.get(key)
    if limits is not None and kept is not None and kept.limits == limits:
        return on_checkpointer(kept.hosted, checkpointer)
    hosted = build()
    if limits is not None and not host.per_run and not _holds(hosted.graph, checkpointer):
        with _lock:
            _kept[key] = Kept(limits, on_checkpointer(hosted, None))
    return hosted


def on_checkpointer(hosted: HostedGraph, checkpointer: Any) -> HostedGraph:
    graph = hosted.graph.copy(update={"checkpointer": checkpointer})
    return HostedGraph(graph, wait_policies=dict(hosted.wait_policies), verifier=hosted.verifier)


def _holds(graph: Any, checkpointer: Any) -> bool:
    """A subgraph keeps the run's checkpointer itself (only the outer graph's is replaced per run)."""
    if checkpointer is None:
        return False
    return any(getattr(sub, "checkpointer", None) is checkpointer for _, sub in graph.get_subgraphs(recurse=True))


def limits_key(host: Host) -> str | None:
    version = host.limits_version
    if version is None:
        return None
    document = json.dumps(version.document, sort_keys=True, default=str)
    return f"{version.number}:{hashlib.sha256(document.encode()).hexdigest()}"


def variant(config: Mapping[str, Any]) -> str:
    configurable = config.get("configurable") or {}
    chosen = {k: v for k, v in configurable.items() if k not in RUN_KEYS}
    return json.dumps(chosen, sort_keys=True, default=repr)


def forget() -> None:
    """Drop every kept graph (the registry changed; tests start from nothing)."""
    with _lock:
        _kept.clear()
