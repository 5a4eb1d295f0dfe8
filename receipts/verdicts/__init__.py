"""Verdicts: the bundle parser (`bundle`) and the classifier (`rules`), plain Python with no Django import.

Values in, values out: the caller passes the receipts, the contracts and `now`, so a replay gives the same
answer (tests/receipts/test_pure_modules.py checks that importing this package loads no Django).
May import: the standard library and its own modules; never: Django, receipts' other rooms, agents, sidewisp.
"""

from receipts.verdicts.bundle import Bundle, Contracts, Wait
from receipts.verdicts.rules import BOUNDARIES, NEXT_MOVES, VERDICT_BOUNDARY, Verdict, classify, classify_run

__all__ = [
    "BOUNDARIES",
    "NEXT_MOVES",
    "VERDICT_BOUNDARY",
    "Bundle",
    "Contracts",
    "Verdict",
    "Wait",
    "classify",
    "classify_run",
]
