"""The retention policy in the admin, and the last pruning run in /metrics and on the System page (issue 22 §3)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from receipts import retention
from receipts.models import AuditEntry, RetentionPolicy, Run
from tests.receipts.test_retention import NOW, a_run, policy

pytestmark = pytest.mark.django_db
URL = "/admin/receipts/retentionpolicy/1/change/"
TOKEN = "scrape-token-for-tests-0123456789"


@pytest.fixture
def admin_(person):
    """Alex, staff in the admin role group (not a superuser): holds change_retention."""
    return person("alex", "admin", is_staff=True)


@pytest.fixture
def operator(person):
    """Oona, staff in the operator role group: may not see or change the policy."""
    return person("oona", "operator", is_staff=True)


def form(**days) -> dict:
    data = {name: getattr(RetentionPolicy(), name) for name in ("receipts_days", "reports_days", "deliveries_days")}
    data |= {"runs_days": 180, "audit_days": 400, "audit_minimum_days": 365}
    return {key: str(value) for key, value in (data | days).items()}


def test_the_admin_changes_the_policy_and_the_change_is_audited(client, admin_):
    client.force_login(admin_)
    assert client.get("/admin/receipts/retentionpolicy/").url == URL
    response = client.post(URL, form(receipts_days=30, audit_days=500))
    assert response.status_code == 302
    saved = RetentionPolicy.objects.get()
    assert (saved.receipts_days, saved.audit_days, saved.changed_by) == (30, 500, admin_)
    entry = AuditEntry.objects.get(action="retention.changed")
    assert entry.actor == admin_ and entry.outcome == "done"
    assert entry.detail == {"changed": {"receipts_days": [90, 30], "audit_days": [400, 500]}}


def test_audit_days_below_the_minimum_are_refused_on_the_field(client, admin_):
    client.force_login(admin_)
    response = client.post(URL, form(audit_days=100, audit_minimum_days=365))
    body = response.content.decode()
    assert response.status_code == 200 and "At least the minimum of 365 days set below." in body
    assert 'id="id_audit_days"' in body and "errorlist" in body
    assert not RetentionPolicy.objects.exists() and not AuditEntry.objects.filter(action="retention.changed").exists()


def test_receipts_kept_longer_than_runs_are_refused_on_the_field(client, admin_):
    client.force_login(admin_)
    body = client.post(URL, form(receipts_days=200, runs_days=180)).content.decode()
    assert "Receipts belong to runs: at most the runs&#x27; 180 days." in body
    assert not RetentionPolicy.objects.exists()


def test_a_user_without_change_retention_cannot_open_or_change_it(client, operator):
    client.force_login(operator)
    assert client.get(URL).status_code == 403
    assert client.post(URL, form(receipts_days=1)).status_code == 403
    assert not RetentionPolicy.objects.exists()
    assert AuditEntry.objects.get(action="retention.changed").outcome == "denied"


def test_a_viewer_of_the_policy_who_posts_a_change_is_refused_and_audited(client, operator):
    from django.contrib.auth.models import Permission

    operator.user_permissions.add(Permission.objects.get(codename="view_retentionpolicy"))
    client.force_login(operator)
    assert client.get(URL).status_code == 200
    assert client.post(URL, form(receipts_days=1)).status_code == 403
    assert not RetentionPolicy.objects.exists()
    assert AuditEntry.objects.get(action="retention.changed").outcome == "denied"


# --- the last run, where operators read it ---------------------------------------------------------


def test_the_system_page_shows_the_last_pruning_run(viewer_client):
    assert "No pruning run yet." in viewer_client.get(reverse("sidewisp:system")).content.decode()
    a_run(ended_days_ago=400, handoffs=2)
    retention.prune(now=NOW, policy=policy(), pause=0)
    body = viewer_client.get(reverse("sidewisp:system"), headers={"HX-Request": "true"}).content.decode()
    assert 'id="system-retention"' in body
    assert "<strong>2</strong> handoffs removed" in body and "<strong>1</strong> runs removed" in body
    assert "op-" not in body  # counts, never what was removed


def test_metrics_show_the_last_pruning_run(client, settings):
    settings.SIDEWISP_METRICS_TOKEN = TOKEN
    settings.SIDEWISP_WORKER_PING_TIMEOUT = 0.2
    a_run(ended_days_ago=400, parts=4)
    retention.prune(now=NOW, policy=policy(), pause=0)
    body = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    samples = {
        (s.name, s.labels.get("kind", "")): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert samples[("sidewisp_retention_last_run_removed_rows", "receipts")] == 4
    assert samples[("sidewisp_retention_last_run_removed_rows", "runs")] == 1
    assert samples[("sidewisp_retention_last_run_failed", "")] == 0
    entry = AuditEntry.objects.get(action=retention.PRUNED)
    assert samples[("sidewisp_retention_last_run_timestamp_seconds", "")] == pytest.approx(entry.at.timestamp())
    assert Run.objects.count() == 0
