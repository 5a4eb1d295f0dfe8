"""Wait owners are notified through their channels: once per event, signed, retried, recorded.

Webhooks go to a real HTTP receiver on loopback (a thread of this process); e-mail to Django's locmem
backend. Deliveries are sent by calling the Celery task eagerly, and once through a real worker.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import io
import ipaddress
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.conf import settings
from django.contrib.auth.models import Group

from agents.limits import DEFAULT_DOCUMENT
from agents.models import LimitsVersion
from receipts import actions
from receipts.ingest.recording import record
from receipts.models import Delivery, NotificationChannel, OutboxIntent, Run
from receipts.notify import notifications
from receipts.tasks import deliver_notification
from receipts.verdicts.bundle import text_problem
from sidewisp.ops.devservices import _free_port
from tests.conftest import handoff_parts, record_wait_for, wait_until

SECRET = "a-webhook-secret-for-tests"


@dataclass
class Receiver:
    """What a loopback webhook receiver got: (headers, raw body) per request; it answers `status`."""

    url: str
    status: int = 204
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in self.requests]


@pytest.fixture
def loopback_allowed(settings, monkeypatch) -> None:
    """Webhooks may reach this host (SIDEWISP_WEBHOOK_ALLOW_NETWORKS): the receivers below listen on loopback,
    which is refused by default. Worker processes started afterwards get the same setting."""
    settings.SIDEWISP_WEBHOOK_ALLOW_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"),)
    monkeypatch.setenv("SIDEWISP_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8")


@pytest.fixture
def receiver(loopback_allowed) -> Iterator[Receiver]:
    got = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.requests.append((dict(self.headers.items()), body))
            self.send_response(got.status)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    got.url = f"http://127.0.0.1:{server.server_port}/hooks/sidewisp"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield got
    server.shutdown()
    server.server_close()


def verifies(headers: dict[str, str], body: bytes, secret: str = SECRET) -> bool:
    """What a receiver does (README): HMAC-SHA256 of `<timestamp>.<delivery id>.<body>` under the shared secret."""
    signed = f"{headers['X-Sidewisp-Timestamp']}.{headers['X-Sidewisp-Delivery']}.".encode() + body
    expected = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers["X-Sidewisp-Signature"])


def webhook(user=None, *, url: str, group=None, name: str = "hook") -> NotificationChannel:
    return NotificationChannel.objects.create(
        name=name, kind=NotificationChannel.Kind.WEBHOOK, user=user, group=group, url=url, secret=SECRET
    )


def send_all() -> None:
    for pk in Delivery.objects.filter(status=Delivery.Status.QUEUED).order_by("pk").values_list("pk", flat=True):
        deliver_notification.apply(args=[pk])


@pytest.fixture
def open_wait(contracts):
    """open_wait("ops-lead") records a hosted demo run's handoff whose wait that owner owns from the start."""

    def _open(owner: str = "ops-lead"):
        token = uuid.uuid4().hex[:10]
        run = Run.objects.create(
            operation_id=f"op-{token}",
            thread_id=f"th-{token}",
            graph="demo",
            scenario="waiting_on_approval",
            mode=Run.Mode.HOSTED,
        )
        for part, value in handoff_parts("waiting"):
            value = {**value, "owner": owner} if part == "wait" else value
            handoff = record(handoff_id=f"h-{token}", operation_id=run.operation_id, part=part, value=value).handoff
        return handoff

    return _open


@pytest.fixture
def approver(person):
    """ops-lead, who owns the wait and has a webhook."""
    return person("ops-lead", "approver", email="ops-lead@example.test")


@pytest.fixture
def wait(approver, open_wait, receiver):
    webhook(approver, url=receiver.url)
    return open_wait("ops-lead")


def test_an_opening_wait_notifies_its_owner_once(wait, receiver):
    wait_part = wait.wait_part
    record(handoff_id=wait.handoff_id, operation_id=wait.run.operation_id, part="wait", value=wait_part, attempt="2")
    record_wait_for(wait)  # the same wait, recorded again under another attempt
    send_all()

    delivery = Delivery.objects.get()
    assert (delivery.event, delivery.recipient, delivery.status) == ("wait.opened", "ops-lead", "sent")
    assert OutboxIntent.objects.filter(kind="deliver", object_id=delivery.pk).count() == 1
    assert [body["event"] for body in receiver.bodies()] == ["wait.opened"]


def test_the_receiver_verifies_the_signature(wait, receiver):
    send_all()

    ((headers, body),) = receiver.requests
    assert verifies(headers, body)
    assert not verifies(headers, body, secret="another-secret")
    assert not verifies(headers, body.replace(b"ops-lead", b"mallory!"))


def test_the_payload_carries_names_codes_times_and_a_link_and_nothing_else(wait, receiver):
    send_all()

    payload = receiver.bodies()[0]
    assert payload["owner"] == "ops-lead"
    assert payload["operation_id"] == wait.run.operation_id
    assert payload["reason"] == "purchase_approval"
    assert payload["link"] == f"{settings.SIDEWISP_BASE_URL}/runs/{wait.run_id}/#handoff-{wait.pk}"
    assert set(payload) == {
        "event", "at", "run", "operation_id", "handoff", "handoff_id", "sender", "receiver", "verdict",
        "owner", "previous_owner", "reason", "deadline_utc", "link",
    }  # fmt: skip
    assert all(text_problem(v) is None for k, v in payload.items() if isinstance(v, str) and k != "link")
    assert "resume_token_id" not in json.dumps(payload) and wait.wait_part["resume_token_id"] not in json.dumps(payload)


@pytest.fixture
def escalating_limits(db):
    document = copy.deepcopy(DEFAULT_DOCUMENT)
    document["default"]["approval"].update(backup_owner="night-lead", on_expiry="escalate", deadline_minutes=30)
    return LimitsVersion.save_new(document, note="escalate overdue approvals")


def test_escalation_notifies_the_backup_owner(wait, escalating_limits, person, receiver):
    night = person("night-lead", "approver")
    webhook(night, url=receiver.url, name="night hook")

    actions.expire_overdue_waits(now=wait.wait_deadline + timedelta(minutes=1))
    send_all()

    escalated = Delivery.objects.get(event="wait.escalated")
    assert (escalated.recipient, escalated.channel.user) == ("night-lead", night)
    assert escalated.payload["previous_owner"] == "ops-lead"
    assert sorted(body["event"] for body in receiver.bodies()) == ["wait.escalated", "wait.opened"]


def test_a_defaulted_wait_tells_its_owner(wait, receiver):
    actions.expire_overdue_waits(now=wait.wait_deadline + timedelta(minutes=1))
    send_all()

    assert [(b["event"], b["owner"]) for b in receiver.bodies()] == [
        ("wait.opened", "ops-lead"),
        ("wait.defaulted", "ops-lead"),
    ]


def test_the_owner_is_reminded_once_within_the_lead_time(wait):
    lead = timedelta(minutes=settings.SIDEWISP_NOTIFY_LEAD_MINUTES)
    too_early = wait.wait_deadline - lead - timedelta(minutes=1)
    within = wait.wait_deadline - lead + timedelta(minutes=1)

    assert notifications.remind_due_waits(now=too_early) == 0
    assert notifications.remind_due_waits(now=within) == 1
    assert notifications.remind_due_waits(now=within + timedelta(seconds=30)) == 0
    assert Delivery.objects.filter(event="wait.due_soon").count() == 1


def test_a_group_channel_notifies_its_members(person, open_wait, receiver):
    person("ops-lead", "approver")
    webhook(group=Group.objects.get(name="approver"), url=receiver.url)

    open_wait("ops-lead")
    send_all()

    assert [b["owner"] for b in receiver.bodies()] == ["ops-lead"]


def test_nobody_else_is_notified(person, open_wait, receiver):
    webhook(person("oncall", "operator"), url=receiver.url)

    open_wait("ops-lead")

    assert not Delivery.objects.exists()


def test_an_email_channel_writes_to_the_owner(approver, open_wait, mailoutbox):
    NotificationChannel.objects.create(name="mail", kind=NotificationChannel.Kind.EMAIL, user=approver)

    handoff = open_wait("ops-lead")
    send_all()

    (mail,) = mailoutbox
    assert mail.to == ["ops-lead@example.test"]
    assert "is waiting for your approval" in mail.subject
    assert f"/runs/{handoff.run_id}/" in mail.body


def test_a_slack_channel_gets_slack_s_text_body(approver, open_wait, receiver):
    NotificationChannel.objects.create(
        name="slack", kind=NotificationChannel.Kind.SLACK, user=approver, url=receiver.url
    )

    open_wait("ops-lead")
    send_all()

    (body,) = receiver.bodies()
    assert list(body) == ["text"]
    assert body["text"].startswith("Sidewisp: a wait of op-")


def test_a_webhook_answering_500_is_retried_then_recorded_as_failed(wait, receiver):
    receiver.status = 500

    send_all()

    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_error) == (
        "failed",
        settings.SIDEWISP_NOTIFY_ATTEMPTS,
        "HTTP 500",
    )
    assert len(receiver.requests) == settings.SIDEWISP_NOTIFY_ATTEMPTS


def test_a_dead_webhook_is_recorded_with_the_reason_and_recording_keeps_working(approver, open_wait, loopback_allowed):
    dead = f"http://127.0.0.1:{_free_port()}/hooks/T0001/a-token-in-the-path"
    webhook(approver, url=dead)

    first = open_wait("ops-lead")
    send_all()
    second = open_wait("ops-lead")

    failed = Delivery.objects.get(payload__handoff=first.pk)
    # Not the operating system's words (ConnectionRefusedError vs a timeout would map the ports behind an address).
    assert (failed.status, failed.last_error) == ("failed", "connection failed")
    assert second.wait_open and Delivery.objects.get(payload__handoff=second.pk).status == "queued"


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_delivers_what_the_recording_promised(approver, open_wait, receiver, worker_process):
    webhook(approver, url=receiver.url)
    open_wait("ops-lead")

    wait_until(lambda: Delivery.objects.filter(status="sent").exists(), what="the worker to deliver", timeout=30)
    ((headers, body),) = receiver.requests
    assert verifies(headers, body)
    assert OutboxIntent.objects.get(kind="deliver").sent_at is not None


def test_the_opt_in_demo_webhook_is_made_once_for_ops_lead(db, settings):
    settings.SIDEWISP_DEMO_WEBHOOK_URL = "http://127.0.0.1:9/hook"
    settings.SIDEWISP_DEMO_WEBHOOK_SECRET = "demo-secret"
    from django.core.management import call_command

    call_command("ensure_demo_user", stdout=io.StringIO())
    call_command("ensure_demo_user", stdout=io.StringIO())

    channel = NotificationChannel.objects.get()
    assert (channel.user.username, channel.kind, channel.secret) == ("ops-lead", "webhook", "demo-secret")
    assert channel.alert_rules.get().verdict == "FALSE_COMPLETE"


def test_without_the_opt_in_the_demo_makes_no_channel(db):
    from django.core.management import call_command

    call_command("ensure_demo_user", stdout=io.StringIO())

    assert not NotificationChannel.objects.exists()


def test_a_delivery_whose_retry_never_reached_the_broker_is_promised_again_once(wait, receiver):
    delivery = Delivery.objects.get()
    Delivery.objects.filter(pk=delivery.pk).update(attempts=2)  # two tries failed; the retry message was lost
    later = delivery.created_at + notifications.STALLED_AFTER + timedelta(seconds=1)

    assert notifications.resend_stalled(now=later) == 1
    assert notifications.resend_stalled(now=later) == 0
    intent = OutboxIntent.objects.get(key=f"deliver:{delivery.pk}:after-2")
    assert (intent.object_id, intent.run_id) == (delivery.pk, wait.run_id)
    send_all()
    assert notifications.resend_stalled(now=later) == 0
    assert [b["event"] for b in receiver.bodies()] == ["wait.opened"]
