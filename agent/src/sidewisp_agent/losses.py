"""What takes the place of evidence the recording side could not store: `evidence_dropped` reports.

Nothing is dropped in silence (spec v1.3): a part that does not validate is replaced by a report naming its
part and field (`replacement`, `dropped_report`), and an entry the writer gives up on by a report naming its
part and why (`loss_reports`), each on the entry's own run. Used by the writer (`sidewisp_agent.writer`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from . import entries as intake
from .bundle import BundleError, identifier_problem
from .entries import EVIDENCE_DROPPED, OBSERVER, digest


def replacement(entry: intake.Entry, exc: BundleError) -> intake.ReportEntry | None:
    """The `evidence_dropped` report for a part that did not validate (a report files its own)."""
    if not isinstance(entry, intake.PartEntry):
        return None
    sender = entry.value.get("sender") if entry.part == "created" and isinstance(entry.value, dict) else None
    # A server's refusal names the entry in its batch (`entries[0].created.sender`): the field is what is left.
    field = _BATCH_INDEX.sub("", exc.field, count=1)
    status = getattr(exc, "status", None)
    why = f"refused by the server: HTTP {status}" if status else None
    return dropped_report(entry.operation_id, entry.part, field, agent=sender, reason=why)


_BATCH_INDEX = re.compile(r"^entries\[\d+\]\.")


def dropped_report(
    operation_id: str, part: str, field: str, *, agent: str | None = OBSERVER, reason: str | None = None
) -> intake.ReportEntry:
    """The `evidence_dropped` report that takes the place of a `part` whose `field` did not validate.

    Filed under `agent` when that is a valid name, else under the observer; `reason` says why when known.
    """
    valid = isinstance(agent, str) and agent != "" and identifier_problem(agent) is None
    detail = {"part": part, "field": field[:200]}
    if reason:
        detail["reason"] = reason
    kind = EVIDENCE_DROPPED
    return intake.ReportEntry(operation_id, agent if valid else OBSERVER, kind, detail, f"drop-{digest(part, field)}")


# What a loss report says of an entry dropped because the writer's buffer stayed full.
BUFFER_FULL = "the evidence buffer stayed full"


def loss_reports(batch: Sequence[intake.Entry], cause: BaseException | str) -> list[intake.ReportEntry]:
    """An `evidence_dropped` report for each entry given up on (one per entry: its part, handoff and attempt),
    on the entry's run, saying why (`cause`: the error, or words); none for a loss report itself."""
    why = f"not written: {cause if isinstance(cause, str) else reason(cause)}"[:200]
    reports = {}
    for entry in batch:
        if isinstance(entry, intake.ReportEntry) and entry.report == EVIDENCE_DROPPED:
            continue
        part = entry.part if isinstance(entry, intake.PartEntry) else entry.kind
        handoff = getattr(entry, "handoff_id", None) or ""
        detail = {"part": part, "field": "", "reason": why}
        if handoff:
            detail["handoff"] = handoff
        attempt = f"lost-{digest(part, handoff, getattr(entry, 'attempt', ''), getattr(entry, 'report', ''))}"
        kind = EVIDENCE_DROPPED
        reports[entry.operation_id, attempt] = intake.ReportEntry(entry.operation_id, OBSERVER, kind, detail, attempt)
    return list(reports.values())


def reason(exc: BaseException) -> str:
    """Why a write failed, in words that name no value: the server's HTTP status, else the error's class."""
    status = getattr(exc, "status", None)
    return f"HTTP {status}" if isinstance(status, int) else type(exc).__name__


def keep(overflowed: list[intake.Entry], entry: intake.Entry, bound: int) -> None:
    """Keep `entry`, dropped for a full buffer, in `overflowed` for its run's loss report: the first `bound` such
    entries between two batches, and the first of each other run up to `bound` more; beyond that an entry is
    counted and logged only."""
    runs = {kept.operation_id for kept in overflowed}
    if len(overflowed) < bound or (entry.operation_id not in runs and len(overflowed) < 2 * bound):
        overflowed.append(entry)
