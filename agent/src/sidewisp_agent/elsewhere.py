"""The store of runs that live on a Sidewisp server: what the recording side reads back of them (nothing but
decisions). `sidewisp_agent.http.HttpStore` is one; a test's stand-in for the server can be one too.
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from .bundle import Contracts

_lock = threading.Lock()


class Elsewhere:
    """A store whose runs live on a Sidewisp server: it reads back nothing of them but decisions.

    Its runs go on (the server parks a run an operator stops), have no parts to reconcile here, no contracts
    (the server classifies) and no decided waits to read: the declined rule follows the decision this process
    last resumed the run with (`remember_resume`).
    """

    remote = True

    def auto_continue(self, operation_id: str) -> bool | None:
        return True  # the server's run: never parked from here

    def stopped(self, operation_ids: Collection[str]) -> set[str]:
        return set()

    def known_parts(self, operation_id: str) -> dict[str, set[str]]:
        return {}

    def contracts(self) -> Contracts | None:
        return None

    def declined_resolution(self, operation_id: str) -> str | None:
        return _resumed_with.get(operation_id)

    def take_decision(self, operation_id: str, *, has_pending: bool) -> dict | None:
        return None


# How this process last resumed each run whose waits are elsewhere, when declined (bounded, oldest forgotten).
_resumed_with: dict[str, str | None] = {}
_REMEMBERED_RESUMES = 1024


def remember_resume(operation_id: str, declined: str | None) -> None:
    """Remember how this process resumed a run: `declined` is its resolution when declining, else None."""
    with _lock:
        _resumed_with.pop(operation_id, None)
        _resumed_with[operation_id] = declined
        while len(_resumed_with) > _REMEMBERED_RESUMES:
            _resumed_with.pop(next(iter(_resumed_with)))
