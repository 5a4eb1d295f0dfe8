"""Rendered rows, cards and history entries of the live pages, kept for reuse (sidewisp.live.render): each by
its template, its id and a digest of every value it is rendered from, for ROW_REUSE_SECONDS."""

from __future__ import annotations

import hashlib
import pickle
import threading
import time
from collections import OrderedDict

# A reused row's relative time ("3 minutes ago") is the page script's to keep current; past this age it is
# rendered again anyway, so a snapshot never carries words much older than its moment.
ROW_REUSE_SECONDS = 10.0
ROW_REUSE_LIMIT = 2_000


def fields(obj: object) -> object:
    """A model instance as its class, its values and its cached relations (what its pickle holds, built in a
    fraction of the time); anything else as it is."""
    state = getattr(obj, "_state", None)
    if state is None:
        return obj
    values = {name: value for name, value in vars(obj).items() if name != "_state"}
    return type(obj).__qualname__, values, state.fields_cache


def digest(values: object) -> bytes | None:
    """`values` digested (pickled: model instances with their fields and cached relations); None when they
    cannot be pickled (the markup is then rendered)."""
    try:
        return hashlib.blake2b(pickle.dumps(values, pickle.HIGHEST_PROTOCOL), digest_size=16).digest()
    except (pickle.PicklingError, TypeError, AttributeError):
        return None


class RowMarkup:
    """Rendered rows and cards by (template, id, values), each kept ROW_REUSE_SECONDS; at most ROW_REUSE_LIMIT."""

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple, tuple[float, str]] = OrderedDict()
        self.lock = threading.Lock()  # renders of several topics run on several threads

    def get(self, key: tuple) -> str | None:
        with self.lock:
            found = self.entries.get(key)
            if found is None or time.monotonic() - found[0] > ROW_REUSE_SECONDS:
                return None
            return found[1]

    def put(self, key: tuple, markup: str) -> None:
        with self.lock:
            self.entries[key] = (time.monotonic(), markup)
            while len(self.entries) > ROW_REUSE_LIMIT:
                self.entries.popitem(last=False)


rows = RowMarkup()
