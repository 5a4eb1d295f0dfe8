"""The history's words: what each receipt part says happened, an attempt in words, times to the millisecond.

Never a code where words will do ("attempt complete-end" is "at the run's end"); the codes stay in the
entries' data attributes for those who need them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sidewisp.pages.timeline import duration

# A receipt part -> what it says happened (spec §1's "recorded when").
PARTS: dict[str, str] = {
    "created": "Transfer requested",
    "reduced": "Transfer applied to the state",
    "destination": "Receiver started",
    "wait": "Wait",
    "verification": "Outcome checked",
    "final_status": "Agent's own claim",
}
FINAL = {"running": "still running", "waiting": "waiting", "complete": "complete", "failed": "failed"}


def part(code: str) -> str:
    return PARTS.get(code, code.replace("_", " ").capitalize())


def attempt(code: str) -> str:
    """An attempt id in words: "1" and "verify-2" are "attempt 1/2", "…-end" is "at the run's end"; an opaque id
    (a digest, a task id) says nothing a person can use and is left out."""
    code = str(code or "")
    last = code.rsplit("-", 1)[-1]
    if last == "end":
        return "at the run's end"
    if last.isdigit() and len(last) < 6:
        return f"attempt {int(last)}"
    return ""


def final(status: str) -> str:
    return FINAL.get(status, status)


def clock(at: datetime) -> str:
    """The time to the millisecond, UTC: "2026-07-30 10:00:01.234 UTC"."""
    utc = at.astimezone(UTC)
    return f"{utc:%Y-%m-%d %H:%M:%S}.{utc.microsecond // 1000:03d} UTC"


def since(at: datetime, start: datetime | None) -> str:
    """The time since the run started: "+1.234 s" ("-12 ms" for what came before its start)."""
    if start is None:
        return ""
    delta = at - start
    return f"+{duration(delta)}" if delta >= timedelta(0) else f"-{duration(-delta)}"
