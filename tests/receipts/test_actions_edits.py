"""An edit is checked against the gated tool's argument schema before the wait's token is used."""

from __future__ import annotations

import pytest

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import create_run
from agents.host import runner
from receipts import actions
from receipts.actions import arguments
from receipts.models import AuditEntry, Decision


@pytest.fixture(autouse=True)
def contracts(transactional_db):
    install_team_contracts()


@pytest.fixture
def no_enqueue(monkeypatch):
    from agents import tasks

    monkeypatch.setattr(tasks.resume_run, "delay", lambda pk: None)


@pytest.fixture
def wait():
    run = create_run("waiting_on_approval")
    runner.start_run(run)
    return run.handoffs.get()


def _edit(owner, wait, args, key="e" * 32):
    token = wait.wait_part["resume_token_id"]
    return actions.decide(user=owner, handoff_id=wait.pk, kind="edit", token=token, key=key, edited_args=args)


def test_an_edit_outside_the_declared_range_is_refused_and_the_token_is_not_spent(owner, wait, no_enqueue):
    result = _edit(owner, wait, {"quantity": -999999})

    assert (result.outcome, result.message) == ("refused", "quantity: Must be between 1 and 100.")
    assert not Decision.objects.exists()
    assert AuditEntry.objects.get(action="wait.edit").outcome == "refused"
    assert _edit(owner, wait, {"quantity": 3}, key="f" * 32).outcome == "done"


def test_an_edit_of_the_wrong_type_is_refused(owner, wait, no_enqueue):
    assert _edit(owner, wait, {"quantity": "many"}).message == "quantity: Must be a whole number."


@pytest.mark.parametrize(
    ("value", "schema", "problem"),
    [
        (0, {"type": "integer", "minimum": 1}, "Must be at least 1."),
        (True, {"type": "integer"}, "Must be a whole number."),
        (2.5, {"type": "number", "exclusiveMaximum": 2.5}, "Must be less than 2.5."),
        ("x", {"type": "string", "enum": ["widget", "server"]}, "Must be one of widget, server."),
        ("", {"type": "string", "minLength": 1}, "Must be at least 1 characters."),
        (5, {"type": "integer", "minimum": 1, "maximum": 100}, ""),
    ],
)
def test_the_schema_check_names_what_is_wrong(value, schema, problem):
    assert arguments.problem(value, schema) == problem
