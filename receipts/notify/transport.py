"""How a message leaves: a POST over a connection pinned to an address destinations allowed, or an e-mail.

Webhooks and Slack go only to the addresses `receipts.notify.destinations` allows (public ones, or the
networks of SIDEWISP_WEBHOOK_ALLOW_NETWORKS), to the address that was checked, and never follow a
redirect. What failed is a `DeliveryError` whose reason says "address not allowed", "connection failed"
or an HTTP status, never the operating system's error text.
"""

from __future__ import annotations

import http.client
import smtplib
import socket

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail

from receipts.models import NotificationChannel
from receipts.notify import destinations

# Reasons no retry can fix: the delivery fails at once.
_FINAL = {"channel removed", "channel inactive", "no e-mail address"}


class DeliveryError(Exception):
    """A send that did not go through; `reason` is an error class or an HTTP status, never a URL or body."""

    def __init__(self, reason: str, *, final: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason[:100]
        self.final = final or reason in _FINAL  # no retry can fix it: the delivery fails at once


def send_email(channel: NotificationChannel, recipient: str, subject: str, text: str) -> None:
    """E-mail `text` to the channel's address, the recipient's, or the channel user's (the first there is)."""
    address = channel.email or _email_of(recipient) or (channel.user.email if channel.user else "")
    # issue 30 §5: a group's channel told of an alert (no recipient) writes to the members who have an address.
    addresses = [address] if address else _emails_of_group(channel.group_id) if not recipient else []
    if not addresses:
        raise DeliveryError("no e-mail address")
    try:
        send_mail(subject, text, None, addresses)
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryError(type(exc).__name__) from None


def _emails_of_group(group_id: int | None) -> list[str]:
    if group_id is None:
        return []
    members = get_user_model()._default_manager.filter(groups=group_id, is_active=True).exclude(email="")
    return sorted(set(members.values_list("email", flat=True)))


def _email_of(username: str) -> str:
    if not username:
        return ""
    users = get_user_model()._default_manager
    found = users.filter(**{get_user_model().USERNAME_FIELD: username}).values_list("email", flat=True).first()
    return found or ""


def post(url: str, body: bytes, headers: dict[str, str]) -> None:
    """POST `body` to `url` over a connection to an address `receipts.notify.destinations` allowed; any answer but
    2xx (a redirect included: it is never followed) is a DeliveryError naming the status."""
    try:
        parts = destinations.target(url)
        port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
        addresses = destinations.resolve(parts.hostname, port, settings.SIDEWISP_WEBHOOK_ALLOW_NETWORKS)
    except destinations.Refused as exc:
        raise DeliveryError(str(exc), final=True) from None
    except (OSError, UnicodeError):
        raise DeliveryError("host not found") from None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Content-Type": "application/json", "User-Agent": "Sidewisp-notifications", **headers}
    status = _post_to(addresses, parts, port, path, body, headers)
    if not 200 <= status < 300:
        raise DeliveryError(f"HTTP {status}")


def _post_to(addresses: list[str], parts, port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
    """The answer's status from the first of `addresses` that takes the connection."""
    https = parts.scheme.lower() == "https"
    for address in addresses:
        connection = _PinnedConnection(parts.hostname, port, address, https, settings.SIDEWISP_NOTIFY_TIMEOUT)
        try:
            connection.request("POST", path, body=body, headers=headers)
            response = connection.getresponse()
            response.read(1024)
            return response.status
        except (OSError, http.client.HTTPException):
            continue  # the operating system's words would tell a port scanner what is behind the address
        finally:
            connection.close()
    raise DeliveryError("connection failed")


class _PinnedConnection(http.client.HTTPSConnection):
    """An HTTP(S) connection to one checked address: no DNS lookup of its own (the host name is only the
    Host header and, over TLS, the name the certificate must carry)."""

    def __init__(self, host: str, port: int, address: str, https: bool, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.address, self.https = address, https
        self.default_port = 443 if https else 80  # the Host header names the port only when it is not this

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host) if self.https else sock
