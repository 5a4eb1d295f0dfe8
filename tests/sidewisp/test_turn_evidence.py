"""The evidence side by side names the calls of the transfer's AI turn that its destination got open (spec v1.3)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from receipts.ingest.recording import record
from receipts.models import Run
from tests.conftest import handoff_parts


@pytest.fixture
def batched_run(contracts):
    """A run whose transfer was made in the same AI message as lookup_fare; `answered` says what the update carried."""

    def _make(answered: list[str], kind: str = "healthy") -> Run:
        run = Run.objects.create(operation_id="op-turn", thread_id="th-turn", mode=Run.Mode.OBSERVED)
        for part, value in handoff_parts(kind):
            if part == "created":
                value = {**value, "turn_tool_call_ids": ["call_1", "call_fare"]}
            elif part == "reduced":
                value = {**value, "tool_message_ids": answered}
            record(handoff_id="h-turn", operation_id="op-turn", part=part, value=value)
        return run

    return _make


def test_the_run_page_names_the_call_of_the_turn_left_open(client, person, batched_run):
    run = batched_run(["call_1"])
    client.force_login(person("watcher", "viewer"))

    page = client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode()

    assert run.handoffs.get().verdict == "OPEN_TOOL_PROTOCOL"
    assert "Same AI turn" in page
    open_calls = page.split("data-open-turn-calls>", 1)[1].split("</span>", 1)[0]
    assert "call_fare" in open_calls and "call_1" not in open_calls


def test_the_run_page_shows_a_turn_whose_calls_were_all_answered_without_warning(client, person, batched_run):
    # Stale control shows the evidence too: there the turn is whole, so nothing is said to be open.
    run = batched_run(["call_fare", "call_1"], kind="stale_control")
    client.force_login(person("watcher", "viewer"))

    page = client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode()

    assert run.handoffs.get().verdict == "STALE_CONTROL"
    assert "Same AI turn" in page and "all answered" in page
    assert "data-open-turn-calls" not in page
