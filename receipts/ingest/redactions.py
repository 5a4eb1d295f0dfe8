"""Identifiers refused and redacted on their way in, shown on their run (spec v1.3 "Identifiers are not secrets").

An id or a name that `bundle.identifier_problem` refuses is stored as `redacted:` and the first 12 hex digits of
its SHA-256 (`bundle.identifier`): the entry it came in is kept, and its run gets one `value_redacted` report per
part and field naming where, never what. The agent side may redact before it sends (the value then arrives
redacted); either way the stored value says so, and that is what is looked for here.

`collecting()` opens a collection for one `intake.apply`; `note` adds to it from wherever a value is minimized;
`report` files what was collected. Outside a collection `note` does nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from receipts.verdicts import bundle

_local = threading.local()


@contextlib.contextmanager
def collecting() -> Iterator[dict[tuple[str, str, str], None]]:
    """Collect (operation id, part, field) of every redacted value noted inside the block (nested: the outer)."""
    outer = getattr(_local, "found", None)
    if outer is not None:
        yield outer
        return
    _local.found = found = {}
    try:
        yield found
    finally:
        _local.found = None


def note(operation_id: str, part: str, value: object, field: str | None = None) -> None:
    """Note the redacted values in `value` (a stored part or id) of `operation_id`'s run, as fields of `part`."""
    found = getattr(_local, "found", None)
    if found is None:
        return
    for where in bundle.redacted_fields(value, field or part):
        found[operation_id, part, where] = None


# An entry's ids that belong to its run or its handoff are reported once for it, not once per part.
_ID_OWNERS = {"operation_id": "run", "thread_id": "run", "graph": "run", "handoff_id": "handoff"}


def note_ids(operation_id: str, part: str, **ids: object) -> None:
    """Note the entry's ids that arrived redacted (`handoff_id=...`, `attempt=...`), the operation id too: as
    fields of the run or the handoff they name, or of `part` (an attempt)."""
    for name, value in {"operation_id": operation_id, **ids}.items():
        if bundle.is_redacted(value):
            note(operation_id, _ID_OWNERS.get(name, part), value, name)
