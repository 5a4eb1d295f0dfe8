"""What a JSON column can store: finite numbers, and text without NUL characters or unpaired surrogates.

PostgreSQL's jsonb refuses `\\u0000` and unpaired surrogates and has no Infinity (Python reads `1e400` as
one); SQLite would keep them and give back something else. Forms and actions that store a JSON value ask
here first, so such a value is an error naming where it is, never a database error, whose message quotes
the value it refused. Plain Python: values in, values out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

# A place in the value is named by its keys, each cut to this many characters ("at messages[0]").
MAX_KEY_SHOWN = 40


class Problem(NamedTuple):
    """Why a value cannot be stored (`what`) and where in it (`at`, "" for the value itself)."""

    what: str
    at: str

    def sentence(self, subject: str) -> str:
        """`subject` and the problem, e.g. "The input holds a NUL character (\\u0000) at messages[0]"."""
        return f"{subject} {self.what}" + (f" at {self.at}" if self.at else "")


def json_problem(value: object) -> Problem | None:
    """The first part of `value` (as `json.loads` gives it) that a JSON column cannot store, or None."""
    pending: list[tuple[object, str]] = [(value, "")]  # a stack, not recursion: nesting is the input's choice
    while pending:
        item, at = pending.pop()
        if isinstance(item, str):
            if what := text_problem(item):
                return Problem(what, at)
        elif isinstance(item, float) and not math.isfinite(item):
            return Problem("holds a number that is not finite (too large, like 1e400)", at)
        elif isinstance(item, Mapping):
            for key, child in reversed(list(item.items())):
                if what := text_problem(str(key)):
                    return Problem(f"{what} in a key", at)
                pending.append((child, _key_path(at, str(key))))
        elif isinstance(item, list | tuple):
            pending.extend((child, f"{at}[{index}]") for index, child in reversed(list(enumerate(item))))
    return None


def text_problem(text: str) -> str:
    """Why `text` cannot be stored as text ("" when it can): a NUL character or an unpaired surrogate."""
    if "\x00" in text:
        return "holds a NUL character (\\u0000)"
    if any("\ud800" <= char <= "\udfff" for char in text):
        return "holds an unpaired surrogate (\\ud800 to \\udfff)"
    return ""


def _key_path(at: str, key: str) -> str:
    shown = key if len(key) <= MAX_KEY_SHOWN else key[: MAX_KEY_SHOWN - 1] + "…"
    return f"{at}.{shown}" if at else shown
