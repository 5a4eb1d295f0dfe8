"""A stand-in agent runtime for the web layer's tests (the real one, agents.host.hosting, registers itself)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from receipts.models import Run
from receipts.workers import runtime


@dataclass
class FakeRuntime:
    """Answers like the real runtime: a hosted run of a registered graph can do everything; an observed
    run can be decided and reopened (its app receives the decision or the reopen) but neither re-verified nor
    driven by a worker."""

    graph_names: list[str] = field(default_factory=lambda: ["support-desk", "coder"])
    started: list[int] = field(default_factory=list)

    def graphs(self) -> list[str]:
        return list(self.graph_names)

    def _hosted(self, run: Run) -> bool:
        return run.mode == Run.Mode.HOSTED and run.graph in self.graph_names

    def can_resume(self, run: Run) -> bool:
        return self._hosted(run) or run.mode == Run.Mode.OBSERVED

    def can_reverify(self, run: Run) -> bool:
        return self._hosted(run)

    def can_drive(self, run: Run) -> bool:
        return self._hosted(run)

    def can_reopen(self, run: Run) -> bool:
        return self._hosted(run) or run.mode == Run.Mode.OBSERVED

    def reopener(self, run: Run) -> str:
        if self._hosted(run):
            return "A Sidewisp worker gives the task back to its agent from the checkpoint."
        return "The app's own process must resume it: await_decision hands it the reopen."

    def resumer(self, run: Run) -> str:
        if self._hosted(run):
            return "Sidewisp's workers resume this run from its checkpoint."
        return "The app's own process resumes this run: it receives the decision through await_decision."

    def pending_call(self, run: Run) -> runtime.PendingCall | None:
        return runtime.PendingCall("place_order", {"sku": "str", "quantity": "int"}, ("approve", "reject"), "")

    def escalation_for(self, handoff) -> runtime.Escalation:
        return runtime.Escalation(backup_owner=None, deadline_minutes=runtime.DEFAULT_DEADLINE_MINUTES)

    def enqueue_start(self, run_id: int) -> None:
        self.started.append(run_id)

    def enqueue_resume(self, decision_id: int) -> None:
        pass

    def enqueue_reverify(self, run_id: int) -> None:
        pass


@pytest.fixture
def fake_runtime() -> Iterator[FakeRuntime]:
    """A registered FakeRuntime for one test; the runtime registered before comes back afterwards."""
    previous = runtime.current()
    fake = FakeRuntime()
    runtime.register(fake)
    yield fake
    runtime.register(previous)


@pytest.fixture
def no_runtime() -> Iterator[None]:
    """No agent runtime registered for one test (what receipts answers before one is installed)."""
    previous = runtime.current()
    runtime.register(runtime.NoRuntime())
    yield
    runtime.register(previous)


def make_hosted(run: Run, graph: str = "support-desk") -> Run:
    """Turn a recorded run into a hosted run of `graph` (the shared factories make observed runs)."""
    Run.objects.filter(pk=run.pk).update(mode=Run.Mode.HOSTED, graph=graph)
    run.refresh_from_db()
    return run
