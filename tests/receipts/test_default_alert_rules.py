"""Default alert rules (issue 30 §5): `migrate` on a fresh database makes them, each an ordinary rule an admin
edits, whose verdict choices are named (HEALTHY not offered); a group's channel e-mails its members."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.apps import apps
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from receipts.models import AlertRule, Delivery
from receipts.notify import alerts, notifications
from receipts.verdicts import words

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = importlib.import_module("receipts.migrations.0034_default_alert_rules")
FAILING_ONLY = importlib.import_module("receipts.migrations.0035_i30admin_alert_rule_verdicts")
SHOW = (
    "import json; from receipts.models import AlertRule as R; "
    "print(json.dumps([[r.name, r.kind, r.active, r.channel.name, r.channel.group.name, r.verdicts] "
    "for r in R.objects.order_by('pk')]))"
)
FAILING = [
    "ROUTE_REJECTED",
    "STALE_CONTROL",
    "OPEN_TOOL_PROTOCOL",
    "CONTEXT_INCOMPLETE",
    "DESTINATION_NOT_STARTED",
    "FALSE_COMPLETE",
]


def test_migrate_on_a_fresh_database_makes_the_default_rules(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}"}
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, cwd=REPO, check=True, timeout=300)

    shown = subprocess.run(
        [*manage, "shell", "-c", SHOW], env=env, cwd=REPO, check=True, timeout=120, capture_output=True
    )

    assert json.loads(shown.stdout.decode().strip().splitlines()[-1]) == [
        ["A handoff settled failing", "window", True, "Admins by e-mail", "admin", FAILING],
        ["Work not applied past its bound", "unapplied", True, "Admins by e-mail", "admin", []],
        ["A wait past its deadline", "overdue", True, "Admins by e-mail", "admin", []],
    ]


@pytest.fixture
def defaults(roles):
    DEFAULTS.add_defaults(apps, None)  # what the migrations did (the test database is kept without them)
    FAILING_ONLY.count_failing_only(apps, None)
    return {rule.kind: rule for rule in AlertRule.objects.all()}


def test_an_admin_edits_a_default_rule_choosing_its_verdict_by_name(client, person, defaults):
    client.force_login(person("alex", "admin", is_staff=True))
    window = defaults["window"]
    url = reverse("admin:receipts_alertrule_change", args=[window.pk])

    page = client.get(url).content.decode()
    response = client.post(
        url,
        {
            "name": window.name,
            "kind": "verdict",
            "verdict": "ROUTE_REJECTED",
            "agent": "",
            "threshold": "0",
            "window_minutes": "10",
            "channel": str(window.channel_id),
            "cooldown_minutes": "15",
            "active": "on",
        },
    )

    for code, text in words.alert_choices():
        assert f'<option value="{code}">{text}</option>' in page
    assert 'value="HEALTHY"' not in page
    assert response.status_code == 302
    assert AlertRule.objects.get(pk=window.pk).verdict == "ROUTE_REJECTED"


def test_a_settled_failing_handoff_fires_the_default_rule_to_the_admins_by_email(
    person, defaults, record_handoff, settings
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    person("alex", "admin", email="alex@example.test")
    person("ada", "admin", email="ada@example.test")
    person("oona", "operator", email="oona@example.test")
    record_handoff("h-1", "op-1", "stale_control")

    alerts.evaluate_all(workers_answering=lambda enough: enough)
    delivery = Delivery.objects.get(payload__rule="A handoff settled failing")

    assert notifications.deliver(delivery.pk) == notifications.SENT
    assert sorted(mail.outbox[0].to) == ["ada@example.test", "alex@example.test"]
    assert "1 failing handoffs in 10 min" in mail.outbox[0].subject


def test_the_settled_failing_rule_counts_the_failing_verdicts_only(defaults):
    assert set(alerts.FAILING) == set(FAILING)  # the migration's frozen list is the assessment's failing one
    assert defaults["window"].verdicts == FAILING


def test_a_window_of_uncertain_waits_only_does_not_fire_the_settled_failing_rule(defaults, record_handoff):
    past = datetime.now(UTC) - timedelta(minutes=1)
    uncertain = [record_handoff(f"h-{i}", f"op-{i}", "waiting", deadline=past) for i in range(3)]

    alerts.evaluate_all(workers_answering=lambda enough: enough)

    assert {handoff.verdict for handoff in uncertain} == {"UNCERTAIN"}
    assert alerts.condition_of(defaults["window"], timezone.now()).count == 0
    assert not AlertRule.objects.get(pk=defaults["window"].pk).firing
    assert not Delivery.objects.filter(payload__rule="A handoff settled failing").exists()


def test_an_uncertain_and_a_settled_failing_handoff_fire_it_counting_the_failing_one(defaults, record_handoff):
    record_handoff("h-u", "op-u", "waiting", deadline=datetime.now(UTC) - timedelta(minutes=1))
    record_handoff("h-f", "op-f", "stale_control")

    alerts.evaluate_all(workers_answering=lambda enough: enough)

    assert AlertRule.objects.get(pk=defaults["window"].pk).firing
    assert alerts.condition_of(defaults["window"], timezone.now()).words.startswith("1 failing handoffs in 10 min")


def test_an_admin_chooses_a_window_rules_verdicts_by_name(client, person, defaults):
    client.force_login(person("alex", "admin", is_staff=True))
    window = defaults["window"]
    url = reverse("admin:receipts_alertrule_change", args=[window.pk])
    form = {
        "name": window.name,
        "kind": "window",
        "verdict": "",
        "agent": "",
        "threshold": "0",
        "window_minutes": "10",
        "channel": str(window.channel_id),
        "cooldown_minutes": "15",
        "active": "on",
    }

    page = client.get(url).content.decode()
    saved = client.post(url, {**form, "verdicts": ["UNCERTAIN", "ROUTE_REJECTED"]})
    refused = client.post(url, {**form, "kind": "verdict", "verdict": "UNCERTAIN", "verdicts": ["UNCERTAIN"]})

    assert 'value="FALSE_COMPLETE"' in page and "False complete</label>" in page
    assert 'name="verdicts" value="HEALTHY"' not in page
    assert saved.status_code == 302
    assert AlertRule.objects.get(pk=window.pk).verdicts == ["UNCERTAIN", "ROUTE_REJECTED"]
    assert refused.status_code == 200
    assert "Only a window rule counts the verdicts chosen here" in refused.content.decode()
    assert AlertRule.objects.get(pk=window.pk).kind == "window"
