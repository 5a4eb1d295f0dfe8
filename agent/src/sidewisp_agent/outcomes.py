"""What `observe` is told and what it gives back: wait policies, outcomes and outcome verifiers."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from langgraph.types import Interrupt


@dataclass(frozen=True)
class WaitPolicy:
    """Who owns an approval wait for a gated tool, why, and for how long."""

    owner: str | None
    reason: str | None
    deadline_minutes: int | None


@dataclass
class Outcome:
    """How an observed call ended: its status, the waits it stopped at, the class name of what failed it."""

    status: str  # complete | waiting | failed | parked
    interrupts: list[Interrupt] = field(default_factory=list)
    error: str = ""


Verifier = Callable[[str], tuple[str, str, str] | None]  # operation_id -> (name, result, receipt id)
ClaimCheck = Callable[[str], bool]  # the final AI message's text -> it claims the gated action was done

# A wait answered this way means the gated action must NOT have happened (spec §1 v1.1).
DECLINED = frozenset({"rejected", "expired"})
# Words by which a final message admits the action was not done ("I did not place the order").
_ADMITS_NOT_DONE = re.compile(
    r"\b(?:not|never|declined|rejected|refused|denied|cancell?ed|unable|cannot|expired|withdrawn)\b|n['\u2019]t\b",
    re.IGNORECASE,
)


def claims_done(text: str) -> bool:
    """The default claim check: a final message claims the gated action was done unless it says it was not.

    Fail closed: silence or a friendly "All set!" counts as a claim. A graph whose agents answer in other
    words (or in structured output) gives its own check as its verifier's `claims_done` attribute
    (`OutcomeVerifier(check, claims_done=...)`).
    """
    return not _ADMITS_NOT_DONE.search(text or "")


@dataclass(frozen=True)
class OutcomeVerifier:
    """A verifier with its own claim check: `check(operation_id)` gives (name, pass|fail, receipt id) or None;
    `claims_done(final message text)` says whether the agent claims the gated action was done."""

    check: Verifier
    claims_done: ClaimCheck = claims_done

    def __call__(self, operation_id: str) -> tuple[str, str, str] | None:
        return self.check(operation_id)


@dataclass(frozen=True)
class Policy:
    """How `observe` was asked to record a run (its keyword arguments)."""

    wait_policies: Mapping[str, WaitPolicy]
    verifier: Verifier | None
    retry_on: tuple[type[BaseException], ...]
    route_version: str | None = None
    durable: bool = False  # every run's evidence stored before observe returns (`sidewisp_agent.writer.settle`)


@dataclass
class Ended:
    """Where an async driver leaves the run's Outcome (an async generator returns nothing)."""

    outcome: Outcome | None = None
