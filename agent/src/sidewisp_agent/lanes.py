"""The evidence writer's queue, shared by its lanes: which queued entries a writer thread may take next.

A writer (`sidewisp_agent.writer.Writer`) drains its queue with one thread, its first lane, while it keeps up.
A store that can take writes on several connections at once (`Sink.lanes`: the server's PostgreSQL) gets more
lanes, each a thread writing its own batches on its own connection: while one lane's batch is being stored by
the database, another prepares the next (issue 32 §2: one process stored ~9,700 receipts/s with one lane, its
Python and the database each waiting for the other; ~12,500/s with two). A lane after the first takes a batch
only when a whole batch is queued (a backlog), so a process that keeps up writes everything in one lane, in
submission order, as before.

Order. Entries of one run are never in two lanes at once, and a run's entries are written in the order they
were submitted: a lane takes nothing of a run that another lane is writing (it skips that run's entries, which
stay queued in order), and takes a run's entries oldest first. Across runs the order may differ under a backlog.
`written_through` says how far the submission order is written without a gap: a flush waits for that.
"""

from __future__ import annotations

from collections import deque

from . import entries as intake


class Queue:
    """Queued entries in submission order (each with its number, `seq`) and what each lane is writing."""

    def __init__(self) -> None:
        self._entries: deque[tuple[int, intake.Entry]] = deque()
        self._writing: dict[int, tuple[int, frozenset[str]]] = {}  # lane -> (its batch's first seq, its runs)

    def __len__(self) -> int:
        return len(self._entries)

    def append(self, seq: int, entry: intake.Entry) -> None:
        self._entries.append((seq, entry))

    def ready(self, lane: int, max_batch: int) -> bool:
        """Whether `lane` may take a batch now: the first lane whenever an entry of a run no other lane is
        writing is queued; another lane only while every lane before it is writing and a whole batch is queued
        besides (a backlog)."""
        if not self._entries:
            return False
        if lane and (len(self._entries) < max_batch or any(first not in self._writing for first in range(lane))):
            return False
        busy = self._busy(lane)
        return not busy or any(entry.operation_id not in busy for _, entry in self._entries)

    def take(self, lane: int, max_batch: int) -> list[intake.Entry]:
        """Up to `max_batch` entries for `lane`, oldest first, none of a run another lane is writing; they count
        as being written by `lane` until `written(lane)`."""
        busy = self._busy(lane)
        if not busy:  # the usual case: the oldest entries, in order
            taken = [self._entries.popleft() for _ in range(min(len(self._entries), max_batch))]
        else:
            taken, kept = [], deque()
            while self._entries and len(taken) < max_batch:
                item = self._entries.popleft()
                (kept if item[1].operation_id in busy else taken).append(item)
            kept.extend(self._entries)
            self._entries = kept
        if taken:
            self._writing[lane] = (taken[0][0], frozenset(entry.operation_id for _, entry in taken))
        return [entry for _, entry in taken]

    def written(self, lane: int) -> None:
        """`lane`'s batch is written (or given up on): its runs are free for any lane."""
        self._writing.pop(lane, None)

    def written_through(self, submitted: int) -> int:
        """How many of the first entries submitted are all written or given up on (`submitted` when all are)."""
        waiting = [first for first, _ in self._writing.values()]
        if self._entries:
            waiting.append(self._entries[0][0])
        return min(waiting, default=submitted)

    def _busy(self, lane: int) -> set[str]:
        """The runs other lanes are writing."""
        return {run for other, (_, runs) in self._writing.items() if other != lane for run in runs}
