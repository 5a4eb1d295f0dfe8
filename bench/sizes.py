"""How big a benchmark runs: full (`make bench`), quick (`--quick`), or tiny (`--tiny`, the smoke test).

The runner sets the size once (`use`); a section chooses its numbers with
`pick(quick, tiny=…, quick=…, full=…)`, where the positional `quick` is what its
`rows(quick)` was given, so a section run alone with its own `--quick` keeps
working. Tiny sizes only prove that a section runs as shipped: their figures
mean nothing.
"""

from __future__ import annotations

from typing import TypeVar

FULL, QUICK, TINY = "full", "quick", "tiny"
SIZES = (FULL, QUICK, TINY)
T = TypeVar("T")

_current = FULL


def use(size: str) -> None:
    """Run every section at `size` from now on."""
    global _current
    if size not in SIZES:
        msg = f"unknown benchmark size {size!r}; one of {', '.join(SIZES)}"
        raise ValueError(msg)
    _current = size


def current() -> str:
    return _current


def is_tiny() -> bool:
    return _current == TINY


def pick(asked_quick: bool, /, *, tiny: T, quick: T, full: T) -> T:
    """`tiny` when the runner runs tiny, else `quick` when asked for (by the runner or the caller), else `full`."""
    if _current == TINY:
        return tiny
    return quick if asked_quick or _current == QUICK else full
