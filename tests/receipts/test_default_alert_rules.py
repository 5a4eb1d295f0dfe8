"""Default alert rules (issue 30 §5): `migrate` on a fresh database makes them, each an ordinary rule an admin
edits, whose verdict choices are named (HEALTHY not offered); a group's channel e-mails its members."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.apps import apps
from django.core import mail
from django.urls import reverse

from receipts.models import AlertRule, Delivery
from receipts.notify import alerts, notifications
from receipts.verdicts import words

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = importlib.import_module("receipts.migrations.0034_default_alert_rules")
SHOW = (
    "import json; from receipts.models import AlertRule as R; "
    "print(json.dumps([[r.name, r.kind, r.active, r.channel.name, r.channel.group.name] "
    "for r in R.objects.order_by('pk')]))"
)


def test_migrate_on_a_fresh_database_makes_the_default_rules(tmp_path):
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'fresh.sqlite3'}"}
    manage = [sys.executable, str(REPO / "manage.py")]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, cwd=REPO, check=True, timeout=300)

    shown = subprocess.run(
        [*manage, "shell", "-c", SHOW], env=env, cwd=REPO, check=True, timeout=120, capture_output=True
    )

    assert json.loads(shown.stdout.decode().strip().splitlines()[-1]) == [
        ["A handoff settled failing", "window", True, "Admins by e-mail", "admin"],
        ["Work not applied past its bound", "unapplied", True, "Admins by e-mail", "admin"],
        ["A wait past its deadline", "overdue", True, "Admins by e-mail", "admin"],
    ]


@pytest.fixture
def defaults(roles):
    DEFAULTS.add_defaults(apps, None)  # what the migration did (the test database is kept without them)
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
    assert "1 non-healthy handoffs in 10 min" in mail.outbox[0].subject
