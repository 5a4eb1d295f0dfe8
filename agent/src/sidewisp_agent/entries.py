"""Evidence entries: what the recording side hands its writer, and what the ingest API carries as JSON.

Plain Python (no Django): the server's `receipts.ingest.intake` stores them (`apply`) and reads them back from
JSON (`parse`); see that module for what each kind means. A credential-shaped id is replaced by its
`redacted:` form as the entry is made, on either side, so the same value finds the same run everywhere.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from . import bundle

# The agent a report is filed under when the agent named in it is not a valid name.
OBSERVER = "observer"
# The report that takes the place of evidence that could not be stored (receipts.models.MiddlewareReport.Kind).
EVIDENCE_DROPPED = "evidence_dropped"


class RunNotOwned(bundle.BundleError):
    """The run belongs to another side (issue 19): a local app may not record into a source's run, nor a source
    into a local run or another source's. Nothing is written; the message names the run, never the source that
    holds it (issue 29 §3).

    Since issue 29 §4 a side finds runs by operation id in its own namespace only, so recording never meets
    another side's run: this stays as the guard for callers that hold a run (claims)."""


def digest(*parts: object) -> str:
    """A short stable digest of `parts` (ids of dropped-evidence reports, handoff ids)."""
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:16]


def _redact_ids(entry: object, *names: str) -> None:
    """Replace the entry's refused ids by their `redacted:` form (a frozen dataclass: set in `__post_init__`)."""
    for name in names:
        value = getattr(entry, name)
        if isinstance(value, str):
            object.__setattr__(entry, name, bundle.identifier(value))


@dataclass(frozen=True)
class PartEntry:
    operation_id: str
    handoff_id: str | None  # None: the run's latest handoff (outcome parts only)
    part: str
    value: object
    attempt: str = "1"
    kind: Literal["part"] = "part"

    def __post_init__(self) -> None:
        _redact_ids(self, "operation_id", "handoff_id", "attempt")


@dataclass(frozen=True)
class ReportEntry:
    operation_id: str
    agent: str
    report: str
    detail: Mapping
    attempt: str
    kind: Literal["report"] = "report"

    def __post_init__(self) -> None:
        _redact_ids(self, "operation_id", "agent", "attempt")


@dataclass(frozen=True)
class SettleEntry:
    operation_id: str
    handoff_id: str
    kind: Literal["settle"] = "settle"

    def __post_init__(self) -> None:
        _redact_ids(self, "operation_id", "handoff_id")


@dataclass(frozen=True)
class RunEntry:
    """A change of the observed run's lifecycle; see `receipts.ingest.lifecycle.apply`."""

    operation_id: str
    status: str  # the run's new status (receipts.models.Run.Status)
    thread_id: str | None = None  # a start: the run is created as an observed run when new
    error: str = ""
    resumed: Mapping | None = None  # a start that resumes waits: {interrupt id or None (all): resolution}
    pending_call: Mapping | None = None  # a wait's pending call, names only (observer.pending_call_of)
    final: bool = False  # the observer's last word on this call: a run without a handoff gets a report
    graph: str = ""  # a start: the graph's name (`configurable.graph_name`), whose team owns the run (issue 22 §2)
    kind: Literal["run"] = "run"

    def __post_init__(self) -> None:
        _redact_ids(self, "operation_id", "thread_id", "graph")


@dataclass(frozen=True)
class PendingEntry:
    """A remote app's pending call of its run's wait, names only (issue 30 §3; receipts.ingest.pendingcalls)."""

    operation_id: str
    pending_call: Mapping
    kind: Literal["pending"] = "pending"

    def __post_init__(self) -> None:
        _redact_ids(self, "operation_id")


Entry = PartEntry | ReportEntry | SettleEntry | RunEntry | PendingEntry


def to_json(entry: Entry) -> dict:
    """The entry as the JSON object `parse` reads back (a run entry stays local: TypeError)."""
    if isinstance(entry, RunEntry):
        msg = "a run entry is applied locally only: the server keeps a remote run's lifecycle"
        raise TypeError(msg)
    if isinstance(entry, PartEntry):
        return {
            "kind": "part",
            "operation_id": entry.operation_id,
            "handoff_id": entry.handoff_id,
            "part": entry.part,
            "value": entry.value,
            "attempt": entry.attempt,
        }
    if isinstance(entry, SettleEntry):
        return {"kind": "settle", "operation_id": entry.operation_id, "handoff_id": entry.handoff_id}
    if isinstance(entry, PendingEntry):
        return {"kind": "pending", "operation_id": entry.operation_id, "pending_call": dict(entry.pending_call)}
    return {
        "kind": "report",
        "operation_id": entry.operation_id,
        "agent": entry.agent,
        "report": entry.report,
        "detail": dict(entry.detail),
        "attempt": entry.attempt,
    }
