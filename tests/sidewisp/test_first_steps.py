"""Issue 30 §6: first steps. New demo passwords on request; no demo traffic without the demo graph."""

from __future__ import annotations

import io
import json
import logging
import re

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from agents.demo import tasks
from receipts.models import AuditEntry, Run


def _logs_in(username: str, password: str) -> bool:
    """The login form accepts them (four failures stay under the per-address lock-out limit of five)."""
    client = Client()
    client.post("/login/", {"username": username, "password": password})
    return "_auth_user_id" in client.session


def test_demo_passwords_prints_new_passwords_that_log_in_and_the_old_ones_no_longer_do(db):
    first = io.StringIO()
    call_command("ensure_demo_user", stdout=first)
    old = dict(re.findall(r"login (\S+) / password (\S+)", first.getvalue()))

    out = io.StringIO()
    call_command("demo_passwords", stdout=out)

    new = dict(re.findall(r"login (\S+) / password (\S+)", out.getvalue()))
    assert sorted(new) == ["admin", "operator", "ops-lead", "viewer"]
    for username, password in new.items():
        assert password != old[username]
        assert _logs_in(username, password), username
        assert not _logs_in(username, old[username]), username
    resets = AuditEntry.objects.filter(action="demo.password_reset")
    assert resets.count() == 4
    assert not any(password in entry.reason for entry in resets for password in new.values())


def test_demo_passwords_creates_missing_demo_accounts_first(db):
    out = io.StringIO()
    call_command("demo_passwords", stdout=out)

    new = dict(re.findall(r"login (\S+) / password (\S+)", out.getvalue()))
    assert _logs_in("viewer", new["viewer"])
    assert sorted(get_user_model().objects.values_list("username", flat=True)) == sorted(new)


def test_the_demo_tick_returns_quietly_when_sidewisp_graphs_leaves_the_demo_out(db, settings, caplog, monkeypatch):
    settings.SIDEWISP_GRAPHS = json.dumps({"desk": "tests/agents/hosted_graph.py:make_graph"})
    monkeypatch.setattr(tasks, "_told", False)
    caplog.set_level(logging.INFO)

    assert [tasks.demo_tick(), tasks.demo_tick()] == [None, None]

    assert not Run.objects.exists()
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING or record.exc_info]
    said = [record.getMessage() for record in caplog.records if record.name == tasks.__name__]
    assert said == ["demo traffic is off: SIDEWISP_GRAPHS does not register the 'demo' graph"]  # once, not per tick
