"""Issue 29 §7: a webhook URL naming a literal internal address is saved with a warning (refused at send time)."""

from __future__ import annotations

import ipaddress

import pytest
from django.contrib.messages import WARNING, get_messages
from django.urls import reverse

from receipts.models import NotificationChannel
from receipts.notify import destinations

pytestmark = pytest.mark.django_db
INTERNAL = [
    "http://10.0.0.5/hook",
    "https://127.0.0.1:8443/x",
    "http://[::1]/x",
    "http://[::ffff:169.254.169.254]/latest",
    "http://localhost:6379/",
    "http://redis.localhost/",
]


def _save(client, url: str, kind: str = "webhook"):
    form = {"name": f"hook {NotificationChannel.objects.count()}", "kind": kind, "url": url, "active": "on"}
    response = client.post(reverse("admin:receipts_notificationchannel_add"), {**form, "secret": "s3cret"})
    assert response.status_code == 302, response.content.decode()[:2000]
    return [m for m in get_messages(response.wsgi_request) if m.level == WARNING]


@pytest.mark.parametrize("url", INTERNAL)
def test_an_internal_literal_address_is_saved_with_a_warning(client, admin_user, url):
    client.force_login(admin_user)

    warnings = _save(client, url)

    assert NotificationChannel.objects.get().url == url  # still saved
    assert len(warnings) == 1
    assert "internal address" in str(warnings[0]) and "refused when it is sent" in str(warnings[0])


@pytest.mark.parametrize("url", ["https://hooks.example.test/x", "https://93.184.216.34/x", "http://[2606:4700::1]/"])
def test_a_host_name_or_a_public_address_is_saved_without_one(client, admin_user, url):
    client.force_login(admin_user)
    assert _save(client, url) == []


def test_a_slack_url_and_a_change_are_warned_about_too(client, admin_user):
    client.force_login(admin_user)
    assert len(_save(client, "https://192.168.1.20/services/x", kind="slack")) == 1
    channel = NotificationChannel.objects.get()
    form = {"name": channel.name, "kind": "slack", "url": "https://10.1.1.1/y", "active": "on"}
    response = client.post(reverse("admin:receipts_notificationchannel_change", args=[channel.pk]), form)
    assert [m for m in get_messages(response.wsgi_request) if m.level == WARNING]


def test_an_allowed_network_is_not_warned_about(client, admin_user, settings):
    settings.SIDEWISP_WEBHOOK_ALLOW_NETWORKS = [ipaddress.ip_network("10.0.0.0/8")]
    client.force_login(admin_user)
    assert _save(client, "http://10.0.0.5/hook") == []
    assert len(_save(client, "http://192.168.0.5/hook")) == 1


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "127.1", "0177.0.0.1"])
def test_the_forms_the_resolver_reads_as_ipv4_are_warned_about(host):
    """The admin's URL field refuses these hosts today; the warning does not depend on it."""
    assert destinations.literal_address_warning(f"http://{host}/x")
