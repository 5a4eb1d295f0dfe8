"""Identifiers are not secrets (spec v1.3), through `observe`: a run named by any identifier keeps its evidence
and is green when healthy; one named by a credential is kept under its redacted id and told so."""

from __future__ import annotations

import hashlib
import json

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from receipts.models import Handoff, MiddlewareReport, Receipt, Run
from tests.agents import teams
from tests.agents.stored import observe

PASS = lambda op: ("stock_check", "pass", "v-1")  # noqa: E731
IDENTIFIERS = {
    "a git SHA": "9fceb02d0ae598e95dc970b74767f19372d61af8",
    "a UUID without dashes": "3f2b8c1e9a7d4e5fb6c0a1d2e3f4a5b6",
    "a session id": "user42_Session2024_10_05_CheckoutFlow-9f8a",
    "a long random-looking run": "Xq8Lr2ZpW9vN4mT7kB3sJ6hF1dG5cY0a" * 4,
}


def ask() -> dict:
    return {"messages": [HumanMessage("hello")]}


@pytest.mark.parametrize("ident", IDENTIFIERS.values(), ids=IDENTIFIERS.keys())
def test_a_run_named_by_any_identifier_keeps_its_evidence_and_is_healthy(team_contracts, ident: str):
    config = {"configurable": {"thread_id": ident}, "recursion_limit": 50}

    outcome = observe(teams.swarm(InMemorySaver()), ask(), config, verifier=PASS)

    assert outcome.status == "complete"
    run = Run.objects.get(operation_id=ident)
    assert (run.status, run.thread_id) == (Run.Status.COMPLETE, ident)
    assert list(run.handoffs.values_list("verdict", flat=True)) == ["HEALTHY"]
    assert not run.reports.filter(kind__in=["evidence_dropped", "no_handoff", "value_redacted"]).exists()


def test_a_run_named_by_a_credential_is_kept_under_its_redacted_id_and_says_so(team_contracts):
    secret = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    config = {"configurable": {"thread_id": secret}, "recursion_limit": 50}

    outcome = observe(teams.swarm(InMemorySaver()), ask(), config, verifier=PASS)

    assert outcome.status == "complete"
    redacted = "redacted:" + hashlib.sha256(secret.encode()).hexdigest()[:12]
    run = Run.objects.get(operation_id=redacted)
    assert (run.status, run.thread_id) == (Run.Status.COMPLETE, redacted)
    assert list(run.handoffs.values_list("verdict", flat=True)) == ["HEALTHY"]
    fields = {d["field"] for d in run.reports.filter(kind="value_redacted").values_list("detail", flat=True)}
    assert "operation_id" in fields
    assert not run.reports.filter(kind="evidence_dropped").exists()
    stored = json.dumps(
        [
            list(Receipt.objects.values_list("payload", "attempt")),
            list(Run.objects.values_list("operation_id", "thread_id", "error")),
            list(Handoff.objects.values_list("handoff_id", flat=True)),
            list(MiddlewareReport.objects.values_list("agent", "detail", "attempt")),
        ]
    )
    assert secret not in stored
