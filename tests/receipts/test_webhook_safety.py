"""Webhooks cannot be aimed inside: save-time URL rules, send-time address rules (every spelling of an
internal address), no rebinding, no redirects, no OS error text; Slack text mentions nobody; the delivery
id is signed, so a replay under a new id fails the verifier the docs print.

Deliveries are sent by the real task (eagerly) over real sockets; "refused" is checked where it counts,
on a loopback receiver that would otherwise have got the request.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.urls import reverse

from receipts.ingest.recording import record
from receipts.models import Delivery, NotificationChannel, Run
from receipts.notify import destinations, notifications
from sidewisp.ops.devservices import _free_port
from tests.conftest import handoff_parts
from tests.receipts.test_notifications import (  # noqa: F401 - loopback_allowed and receiver are fixtures
    SECRET,
    loopback_allowed,
    receiver,
    send_all,
    webhook,
)

# The receiver's verifier is printed on the Administration page ("Notifications and alerts").
DOCS_PAGE = Path(django_settings.BASE_DIR) / "docs" / "administration.md"


@dataclass
class FakeDns:
    """Names a test decides the answers for; `asked` counts every lookup of those names."""

    answers: dict[str, list[list[str]]] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def answer(self, name: str, *successive: list[str]) -> None:
        """`name` resolves to the first list, then the next on each later lookup (the last one repeats)."""
        self.answers[name] = list(successive)


@pytest.fixture
def fake_dns(monkeypatch) -> FakeDns:
    """Other names and numeric hosts go to the system resolver, as in production."""
    dns = FakeDns()
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host not in dns.answers:
            return real(host, port, *args, **kwargs)
        dns.asked.append(host)
        queue = dns.answers[host]
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        return [
            (socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
            for address in addresses
        ]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return dns


@pytest.fixture
def redirecting(request) -> Iterator[tuple[str, list[str]]]:
    """A loopback receiver that answers 302 to elsewhere: its URL and the paths it was asked for."""
    request.getfixturevalue("loopback_allowed")
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            asked.append(self.path)
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:9/elsewhere")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", asked
    server.shutdown()
    server.server_close()


@pytest.fixture
def ops_lead(person):
    return person("ops-lead", "approver")


def open_wait(owner: str = "ops-lead", *, operation_id: str | None = None, reason: str | None = None):
    token = uuid.uuid4().hex[:10]
    run = Run.objects.create(
        operation_id=operation_id or f"op-{token}", thread_id=f"th-{token}", graph="demo", mode=Run.Mode.HOSTED
    )
    for part, value in handoff_parts("waiting"):
        if part == "wait":
            value = {**value, "owner": owner, **({"reason": reason} if reason else {})}
        handoff = record(handoff_id=f"h-{token}", operation_id=run.operation_id, part=part, value=value).handoff
    return handoff


def channel_to(user, url: str, kind: str = NotificationChannel.Kind.WEBHOOK) -> NotificationChannel:
    secret = SECRET if kind == NotificationChannel.Kind.WEBHOOK else ""
    return NotificationChannel.objects.create(
        name=f"ch-{uuid.uuid4().hex[:6]}", kind=kind, user=user, url=url, secret=secret
    )


# --- save time: only http(s), never credentials ------------------------------------------------------

NOT_A_WEBHOOK = [
    "ftp://files.example.com/hook",
    "ftps://files.example.com/hook",
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_INFO",
    "dict://127.0.0.1:6379/info",
    "javascript:alert(1)",
    "http://user:pass@hooks.example.com/x",
    "https://token@hooks.example.com/x",
    "https://:secret@hooks.example.com/x",
    "http:///no-host",
    "https://hooks.example.com:99999/x",
]


@pytest.mark.parametrize("url", NOT_A_WEBHOOK)
def test_a_channel_url_that_is_not_plain_http_is_refused_at_save_time(ops_lead, url):
    with pytest.raises(ValidationError) as refused:
        channel_to(ops_lead, url)

    assert "url" in refused.value.message_dict
    assert not NotificationChannel.objects.exists()


@pytest.mark.parametrize("url", ["ftp://files.example.com/hook", "http://user:pass@hooks.example.com/x"])
def test_the_admin_form_names_the_url_problem(client, admin_user, url):
    client.force_login(admin_user)
    form = {"name": "lead hook", "kind": "webhook", "url": url, "secret": "s3cret", "active": "on"}

    response = client.post(reverse("admin:receipts_notificationchannel_add"), form)

    assert response.status_code == 200
    assert "The URL must" in response.content.decode()
    assert not NotificationChannel.objects.exists()


# --- send time: every spelling of an internal address --------------------------------------------------

# {port}: a loopback receiver that must get nothing. Hostnames in FAKE_DNS resolve as a cloud's resolver would.
FAKE_DNS = {
    "metadata.google.internal": ["169.254.169.254"],
    "redis.internal": ["10.0.0.7"],
    "mixed.example": ["93.184.216.34", "10.0.0.5"],
}
INTERNAL = [
    # cloud metadata, link-local
    "http://169.254.169.254/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://2852039166/",
    "http://0xa9fea9fe/",
    "http://0251.0376.0251.0376/",
    "http://169.254.43518/",
    "http://[2002:a9fe:a9fe::1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[fe80::1]/",
    # this host: Redis, PostgreSQL, anything listening on loopback
    "http://127.0.0.1:{port}/",
    "https://127.0.0.1:{port}/",
    "http://localhost:{port}/",
    "http://127.1:{port}/",
    "http://2130706433:{port}/",
    "http://0x7f000001:{port}/",
    "http://0177.0.0.1:{port}/",
    "http://[::ffff:127.0.0.1]:{port}/",
    "http://[::127.0.0.1]:{port}/",
    "http://[::1]:{port}/",
    "http://0.0.0.0:{port}/",
    "http://0:{port}/",
    "http://[::]:{port}/",
    # private, shared, multicast, reserved, documentation
    "http://10.0.0.1/",
    "http://redis.internal:6379/",
    "http://172.16.0.1/",
    "http://172.31.255.254/",
    "http://192.168.0.1/",
    "http://192.168.1.1:5432/",
    "http://100.64.0.1/",
    "http://[fc00::1]/",
    "http://[fd12:3456::1]/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://192.0.2.1/",
    # a name with one public and one private answer
    "http://mixed.example/",
]


@pytest.mark.parametrize("url", INTERNAL)
def test_an_internal_address_is_refused_at_send_time_and_never_reached(ops_lead, receiver, fake_dns, settings, url):  # noqa: F811
    settings.SIDEWISP_WEBHOOK_ALLOW_NETWORKS = ()
    for name, addresses in FAKE_DNS.items():
        fake_dns.answer(name, addresses)
    port = int(receiver.url.rsplit(":", 1)[1].split("/")[0])
    channel_to(ops_lead, url.format(port=port))
    open_wait()

    send_all()

    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_error) == ("failed", 1, "address not allowed")
    assert receiver.requests == []


def test_every_form_of_the_issue_is_in_the_list():
    # issue 19 named these; the list above covers each, and more.
    named = ["169.254.169.254", "metadata.google.internal", "[::ffff:169.254.169.254]", "127.0.0.1:{port}",
             "localhost:{port}", "[::1]", "0.0.0.0", "10.", "192.168."]  # fmt: skip
    assert all(any(form in url for url in INTERNAL) for form in named)
    assert len(INTERNAL) + len(NOT_A_WEBHOOK) >= 32


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "8.8.8.8"])
def test_a_public_address_is_allowed(address):
    assert destinations.address_allowed(address)


def test_the_operator_setting_allows_a_named_network_in_every_spelling(ops_lead, receiver, settings):  # noqa: F811
    settings.SIDEWISP_WEBHOOK_ALLOW_NETWORKS = (ipaddress.ip_network("127.0.0.0/8"),)
    port = receiver.url.rsplit(":", 1)[1].split("/")[0]
    for url in (f"http://127.0.0.1:{port}/a", f"http://localhost:{port}/b", f"http://2130706433:{port}/c"):
        channel_to(ops_lead, url)
    open_wait()

    send_all()

    assert sorted(Delivery.objects.values_list("status", flat=True)) == ["sent", "sent", "sent"]
    assert len(receiver.requests) == 3


def test_an_allowed_network_does_not_open_the_others(ops_lead, settings):
    settings.SIDEWISP_WEBHOOK_ALLOW_NETWORKS = (ipaddress.ip_network("10.20.0.0/16"),)
    channel_to(ops_lead, "http://169.254.169.254/")
    open_wait()

    send_all()

    assert Delivery.objects.get().last_error == "address not allowed"


def test_the_connection_goes_to_the_checked_address_without_a_second_lookup(ops_lead, receiver, fake_dns):  # noqa: F811
    # Rebinding: a name that answers an allowed address to the check, then the metadata service to a second look.
    port = receiver.url.rsplit(":", 1)[1].split("/")[0]
    fake_dns.answer("rebind.example", ["127.0.0.1"], ["169.254.169.254"])
    channel_to(ops_lead, f"http://rebind.example:{port}/hook")
    open_wait()

    send_all()

    ((headers, _),) = receiver.requests
    assert headers["Host"] == f"rebind.example:{port}"
    assert fake_dns.asked == ["rebind.example"]
    assert Delivery.objects.get().status == "sent"


def test_a_redirect_is_never_followed(ops_lead, redirecting, settings):
    url, asked = redirecting
    settings.SIDEWISP_NOTIFY_ATTEMPTS = 1
    channel_to(ops_lead, url)
    open_wait()

    send_all()

    assert asked == ["/hook"]
    delivery = Delivery.objects.get()
    assert (delivery.status, delivery.last_error) == ("failed", "HTTP 302")


def test_a_name_that_does_not_resolve_says_so_without_the_resolver_s_words(ops_lead, settings):
    settings.SIDEWISP_NOTIFY_ATTEMPTS = 1
    channel_to(ops_lead, "https://no-such-host.invalid/hook")
    open_wait()

    send_all()

    assert Delivery.objects.get().last_error == "host not found"


def test_the_deliveries_admin_shows_a_refusal_as_address_not_allowed(client, admin_user, ops_lead, settings):
    settings.SIDEWISP_WEBHOOK_ALLOW_NETWORKS = ()
    channel_to(ops_lead, f"http://127.0.0.1:{_free_port()}/")
    open_wait()
    send_all()
    client.force_login(admin_user)

    page = client.get(reverse("admin:receipts_delivery_changelist")).content.decode()

    assert "address not allowed" in page
    assert "127.0.0.1" not in page


# --- Slack: names are text, never mentions -------------------------------------------------------------

MENTIONS = ["<!channel>", "<!here>", "<@U123>", "<!subteam^S1|ops>", "a & b"]


@pytest.mark.parametrize("payload", MENTIONS)
def test_an_agent_chosen_name_reaches_slack_escaped(ops_lead, receiver, payload):  # noqa: F811
    channel_to(ops_lead, receiver.url, kind=NotificationChannel.Kind.SLACK)
    open_wait(operation_id=f"op-{payload}-{uuid.uuid4().hex[:4]}")

    send_all()

    (body,) = receiver.bodies()
    escaped = payload.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert escaped in body["text"]
    assert "<" not in body["text"] and ">" not in body["text"]


def test_every_interpolated_value_of_the_slack_text_is_escaped():
    payloads = [
        {"event": notifications.WAIT_ESCALATED, "operation_id": "<!here>", "reason": "<@U1>",
         "previous_owner": "<!channel>", "deadline_utc": "<x>"},
        {"event": "alert.fired", "rule": "<!channel>", "condition": "<@U2> & co"},
    ]  # fmt: skip
    for payload in payloads:
        text = notifications.summary(payload, notifications.slack_escaped)
        assert "<" not in text and ">" not in text
        assert "&lt;" in text


def test_the_e_mail_subject_keeps_the_names_as_they_are():
    payload = {"event": notifications.WAIT_OPENED, "operation_id": "op-<1>", "reason": "a&b"}

    assert notifications.summary(payload) == "Sidewisp: a wait of op-<1> (a&b) is waiting for your approval."


# --- the delivery id is signed ---------------------------------------------------------------------------


def docs_verifier():
    """The `verified` function exactly as the docs print it."""
    text = DOCS_PAGE.read_text()
    code = re.search(r"```python\n(import hashlib, hmac, time\n.*?def verified\(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/administration.md", "exec"), namespace)  # the documented code is what is tested
    return namespace["verified"]


@pytest.fixture
def signed_request(ops_lead, receiver):  # noqa: F811
    webhook(ops_lead, url=receiver.url)
    open_wait()
    send_all()
    ((headers, body),) = receiver.requests
    return headers, body


def test_the_documented_verifier_accepts_what_sidewisp_sends(signed_request):
    headers, body = signed_request

    assert docs_verifier()(headers, body, SECRET.encode())
    assert headers["X-Sidewisp-Delivery"] == str(Delivery.objects.get().pk)


def test_a_replay_under_a_new_delivery_id_fails_the_documented_verifier(signed_request):
    headers, body = signed_request
    replayed = {**headers, "X-Sidewisp-Delivery": str(int(headers["X-Sidewisp-Delivery"]) + 1000)}

    assert not docs_verifier()(replayed, body, SECRET.encode())


def test_a_replay_with_a_changed_body_or_timestamp_fails_too(signed_request):
    headers, body = signed_request
    verified = docs_verifier()

    assert not verified(headers, body.replace(b"wait.opened", b"wait.escalated"), SECRET.encode())
    assert not verified(
        {**headers, "X-Sidewisp-Timestamp": str(int(headers["X-Sidewisp-Timestamp"]) + 1)}, body, SECRET.encode()
    )
