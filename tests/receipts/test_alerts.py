"""Alert rules fire and resolve once per condition, respect their cooldown and mute, and only admins edit them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from receipts import actions
from receipts.models import AlertRule, Delivery, NotificationChannel, OutboxIntent
from receipts.notify import alerts
from receipts.notify.alerts import FIRED, RESOLVED, RuleState, step
from tests.conftest import record_wait_for

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
COOLDOWN = timedelta(minutes=15)
QUIET = RuleState(firing=False, announced=False, fired_at=None)


# --- the announcing rule (pure) ---------------------------------------------------------------


def test_a_condition_that_starts_fires_once():
    state, notice = step(QUIET, True, T0, cooldown=COOLDOWN, muted_until=None)
    again, repeat = step(state, True, T0 + timedelta(minutes=1), cooldown=COOLDOWN, muted_until=None)

    assert (notice, repeat) == (FIRED, None)
    assert again == RuleState(firing=True, announced=True, fired_at=T0)


def test_a_condition_that_ends_resolves_once():
    firing, _ = step(QUIET, True, T0, cooldown=COOLDOWN, muted_until=None)
    ended, notice = step(firing, False, T0 + timedelta(minutes=1), cooldown=COOLDOWN, muted_until=None)
    _, repeat = step(ended, False, T0 + timedelta(minutes=2), cooldown=COOLDOWN, muted_until=None)

    assert (notice, repeat) == (RESOLVED, None)


def test_a_condition_back_within_the_cooldown_is_sent_once_the_cooldown_has_passed():
    firing, _ = step(QUIET, True, T0, cooldown=COOLDOWN, muted_until=None)
    ended, _ = step(firing, False, T0 + timedelta(minutes=1), cooldown=COOLDOWN, muted_until=None)
    back, early = step(ended, True, T0 + timedelta(minutes=2), cooldown=COOLDOWN, muted_until=None)
    _, later = step(back, True, T0 + COOLDOWN, cooldown=COOLDOWN, muted_until=None)

    assert (early, later) == (None, FIRED)


def test_a_condition_that_comes_and_goes_within_the_cooldown_sends_nothing():
    firing, _ = step(QUIET, True, T0, cooldown=COOLDOWN, muted_until=None)
    ended, _ = step(firing, False, T0 + timedelta(minutes=1), cooldown=COOLDOWN, muted_until=None)
    back, _ = step(ended, True, T0 + timedelta(minutes=2), cooldown=COOLDOWN, muted_until=None)
    _, notice = step(back, False, T0 + timedelta(minutes=3), cooldown=COOLDOWN, muted_until=None)

    assert notice is None


def test_a_muted_rule_sends_nothing_until_the_mute_ends_then_what_holds():
    mute = T0 + timedelta(minutes=30)
    muted, during = step(QUIET, True, T0, cooldown=COOLDOWN, muted_until=mute)
    _, after = step(muted, True, mute, cooldown=COOLDOWN, muted_until=mute)

    assert (during, after) == (None, FIRED)


# --- rules on the evidence ------------------------------------------------------------------


@pytest.fixture
def channel(db):
    return NotificationChannel.objects.create(
        name="ops", kind=NotificationChannel.Kind.WEBHOOK, url="http://127.0.0.1:9/hook", secret="s3cret-for-tests"
    )


def rule(channel, kind: str, **fields) -> AlertRule:
    return AlertRule.objects.create(name=fields.pop("name", kind), kind=kind, channel=channel, **fields)


def events() -> list[tuple[str, str]]:
    return [(d.event, d.payload["rule"]) for d in Delivery.objects.order_by("pk")]


def test_a_false_complete_fires_a_verdict_rule_in_the_recording_transaction(channel, record_handoff):
    rule(channel, "verdict", verdict="FALSE_COMPLETE", agent="sales", name="false completions on sales")

    handoff = record_handoff("h-1", "op-1", "false_complete")

    delivery = Delivery.objects.get()
    assert (delivery.event, delivery.payload["handoff_id"], delivery.payload["count"]) == (FIRED, "h-1", 1)
    assert delivery.payload["link"].endswith(f"/runs/{handoff.run_id}/#handoff-{handoff.pk}")
    assert OutboxIntent.objects.get(kind="deliver").object_id == delivery.pk


def test_a_second_false_complete_while_firing_sends_nothing_more(channel, record_handoff):
    rule(channel, "verdict", verdict="FALSE_COMPLETE")

    record_handoff("h-1", "op-1", "false_complete")
    record_handoff("h-2", "op-2", "false_complete")

    assert events() == [(FIRED, "verdict")]


def test_a_verdict_rule_on_another_agent_stays_quiet(channel, record_handoff):
    rule(channel, "verdict", verdict="FALSE_COMPLETE", agent="billing")

    record_handoff("h-1", "op-1", "false_complete")

    assert not Delivery.objects.exists()


def test_settling_the_false_completion_resolves_the_rule_once(channel, record_handoff, operator):
    rule(channel, "verdict", verdict="FALSE_COMPLETE")
    handoff = record_handoff("h-1", "op-1", "false_complete")

    actions.settle(user=operator, handoff_id=handoff.pk, how="accept", key=uuid.uuid4().hex, reason="checked by hand")
    alerts.evaluate_all()

    assert events() == [(FIRED, "verdict"), (RESOLVED, "verdict")]


def test_a_window_rule_fires_above_its_threshold_and_resolves_when_the_window_has_passed(channel, record_handoff):
    rule(channel, "window", threshold=1, window_minutes=10, cooldown_minutes=0)
    record_handoff("h-1", "op-1", "false_complete")
    alerts.evaluate_all()
    quiet = events()
    record_handoff("h-2", "op-2", "stale_control")

    alerts.evaluate_all()
    alerts.evaluate_all()
    alerts.evaluate_all(now=timezone.now() + timedelta(minutes=11))

    assert quiet == []
    assert events() == [(FIRED, "window"), (RESOLVED, "window")]
    assert "2 non-healthy handoffs in 10 min" in Delivery.objects.get(event=FIRED).payload["condition"]


def test_an_overdue_wait_fires_and_resolves_when_it_is_decided(channel, record_handoff):
    rule(channel, "overdue")
    past = timezone.now() - timedelta(minutes=1)
    wait = record_handoff("h-1", "op-1", "waiting", deadline=past)

    alerts.evaluate_all()
    record_wait_for(wait, resolved=True, resolution="approved")
    alerts.evaluate_all()

    assert events() == [(FIRED, "overdue"), (RESOLVED, "overdue")]
    assert Delivery.objects.get(event=FIRED).payload["link"].endswith("/waits/")


def test_a_lost_worker_heartbeat_fires_and_its_return_resolves(channel):
    rule(channel, "heartbeat", threshold=2)

    alerts.evaluate_all(workers_answering=lambda enough: 1)
    alerts.evaluate_all(workers_answering=lambda enough: 1)
    alerts.evaluate_all(workers_answering=lambda enough: 2)

    assert events() == [(FIRED, "heartbeat"), (RESOLVED, "heartbeat")]
    assert Delivery.objects.get(event=FIRED).payload["condition"] == "1 of 2 workers answering"
    assert OutboxIntent.objects.filter(kind="deliver", run=None).count() == 2


def test_with_no_worker_answering_the_real_ping_the_heartbeat_rule_fires(channel, celery_isolation):
    rule(channel, "heartbeat")

    alerts.evaluate_all()  # this test run's own control exchange: no worker listens on it

    assert events() == [(FIRED, "heartbeat")]
    assert Delivery.objects.get().payload["condition"] == "0 of 1 workers answering"


def test_a_rule_back_within_its_cooldown_waits_for_it(channel):
    rule(channel, "heartbeat", cooldown_minutes=15)
    now = timezone.now()

    alerts.evaluate_all(now=now, workers_answering=lambda enough: 0)
    alerts.evaluate_all(now=now + timedelta(minutes=1), workers_answering=lambda enough: 1)
    alerts.evaluate_all(now=now + timedelta(minutes=2), workers_answering=lambda enough: 0)
    before_cooldown = events()
    alerts.evaluate_all(now=now + timedelta(minutes=15), workers_answering=lambda enough: 0)

    assert before_cooldown == [(FIRED, "heartbeat"), (RESOLVED, "heartbeat")]
    assert events() == [(FIRED, "heartbeat"), (RESOLVED, "heartbeat"), (FIRED, "heartbeat")]


def test_a_muted_rule_keeps_quiet_until_the_mute_ends(channel):
    now = timezone.now()
    rule(channel, "heartbeat", muted_until=now + timedelta(hours=1))

    alerts.evaluate_all(now=now, workers_answering=lambda enough: 0)
    muted = events()
    alerts.evaluate_all(now=now + timedelta(hours=1), workers_answering=lambda enough: 0)

    assert muted == []
    assert events() == [(FIRED, "heartbeat")]


def test_an_inactive_rule_is_not_evaluated(channel, record_handoff):
    rule(channel, "verdict", verdict="FALSE_COMPLETE", active=False)

    record_handoff("h-1", "op-1", "false_complete")
    alerts.evaluate_all()

    assert not Delivery.objects.exists()


# --- the admin: only staff with the model permissions edit rules and channels ----------------------


@pytest.fixture
def admin_user(person):
    return person("alex", "admin", is_staff=True)


def test_staff_without_the_permission_cannot_open_or_add_rules(client, person, channel):
    client.force_login(person("sam", "operator", is_staff=True))

    assert client.get(reverse("admin:receipts_alertrule_changelist")).status_code == 403
    assert client.post(reverse("admin:receipts_alertrule_add"), _rule_form(channel)).status_code == 403
    assert client.get(reverse("admin:receipts_notificationchannel_add")).status_code == 403
    assert not AlertRule.objects.exists()


def test_a_user_who_is_not_staff_is_sent_to_the_admin_login(client, person):
    client.force_login(person("ops-lead", "approver"))

    response = client.get(reverse("admin:receipts_alertrule_changelist"))

    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_admin_role_adds_a_rule(client, admin_user, channel):
    client.force_login(admin_user)

    response = client.post(reverse("admin:receipts_alertrule_add"), _rule_form(channel))

    assert response.status_code == 302
    assert AlertRule.objects.get().verdict == "FALSE_COMPLETE"


def test_a_verdict_rule_without_its_verdict_is_refused_naming_the_field(client, admin_user, channel):
    client.force_login(admin_user)

    response = client.post(reverse("admin:receipts_alertrule_add"), {**_rule_form(channel), "verdict": ""})

    assert response.status_code == 200
    assert "A verdict rule needs the verdict it watches." in response.content.decode()
    assert not AlertRule.objects.exists()


def test_a_webhook_channel_needs_a_secret_and_never_shows_it(client, admin_user):
    client.force_login(admin_user)
    form = {"name": "lead hook", "kind": "webhook", "url": "https://hooks.example.test/x", "active": "on"}

    refused = client.post(reverse("admin:receipts_notificationchannel_add"), form)
    client.post(reverse("admin:receipts_notificationchannel_add"), {**form, "secret": "the-shared-secret"})
    channel = NotificationChannel.objects.get()
    page = client.get(reverse("admin:receipts_notificationchannel_change", args=[channel.pk])).content.decode()

    assert "A webhook needs a secret" in refused.content.decode()
    assert channel.secret == "the-shared-secret"
    assert "the-shared-secret" not in page


def _rule_form(channel) -> dict:
    return {
        "name": "false completions",
        "kind": "verdict",
        "verdict": "FALSE_COMPLETE",
        "agent": "",
        "threshold": "0",
        "window_minutes": "10",
        "channel": str(channel.pk),
        "cooldown_minutes": "15",
        "active": "on",
    }


def test_the_deliveries_list_shows_why_and_never_the_url(client, admin_user, channel, record_handoff):
    rule(channel, "verdict", verdict="FALSE_COMPLETE")
    record_handoff("h-1", "op-1", "false_complete")
    Delivery.objects.update(status="failed", attempts=5, last_error="HTTP 500")
    client.force_login(admin_user)

    page = client.get(reverse("admin:receipts_delivery_changelist")).content.decode()
    channels = client.get(reverse("admin:receipts_notificationchannel_changelist")).content.decode()

    assert "HTTP 500" in page and "alert.fired" in page
    assert channel.url not in page and channel.url not in channels
