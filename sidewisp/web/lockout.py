"""The login throttle: its two limits, the lock-out page and its audit entry (django-axes does the counting).

A lock-out must not be a weapon: failures are counted per username *and address* (AXES_FAILURE_LIMIT),
so an attacker guessing one person's password from one address never locks that person out of the
addresses they log in from, and per address across usernames (SIDEWISP_LOGIN_ADDRESS_LIMIT, higher: an
office behind one address shares it), so one address cannot try many accounts either.
"""

from __future__ import annotations

from datetime import datetime

from axes.handlers.database import AxesDatabaseHandler
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from receipts.org import audit


class LoginThrottle(AxesDatabaseHandler):
    """django-axes' database handler with a limit of its own for the per-address count.

    axes compares one number with one limit (AXES_FAILURE_LIMIT); this handler reports the
    per-address count scaled to that limit, so the address reaches it exactly at
    SIDEWISP_LOGIN_ADDRESS_LIMIT failures.
    """

    def get_failures(self, request: HttpRequest, credentials: dict | None = None) -> int:
        pair, address = (_failures(attempts) for attempts in self.get_user_attempts(request, credentials))
        return max(pair, address * settings.AXES_FAILURE_LIMIT // settings.SIDEWISP_LOGIN_ADDRESS_LIMIT)


def _failures(attempts) -> int:
    return attempts.aggregate(failures=Sum("failures_since_start"))["failures"] or 0


def audit_lockout(
    sender: object, request: HttpRequest | None = None, username: object = None, **kwargs: object
) -> None:
    """`axes.signals.user_locked_out` receiver: one audit entry when a lock-out starts.

    axes sends the signal again for every attempt made while locked out; only the
    attempt that reached the limit has counted its failures (axes_failures_since_start),
    so anonymous traffic cannot fill the audit log with lock-out entries.
    """
    if getattr(request, "axes_failures_since_start", None) is None:
        return
    audit.log_lockout(username, failure_limit=settings.AXES_FAILURE_LIMIT, cooloff_minutes=_cooloff_minutes())


def locked_out_response(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: dict | None = None
) -> HttpResponse:
    """AXES_LOCKOUT_CALLABLE: what happened, and from when logging in works again (429)."""
    context = {
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "address_limit": settings.SIDEWISP_LOGIN_ADDRESS_LIMIT,
        "cooloff_minutes": _cooloff_minutes(),
        "until": _locked_until(request, credentials),
    }
    return render(request, "registration/locked_out.html", context, status=429)


def _locked_until(request: HttpRequest, credentials: dict | None) -> datetime:
    """The end of the longest lock that applies: the cool-off after that count's last failure."""
    username = (credentials or {}).get("username") or request.POST.get("username")
    address = getattr(request, "axes_ip_address", None)
    counts = [
        (AccessAttempt.objects.filter(username=username, ip_address=address), settings.AXES_FAILURE_LIMIT),
        (AccessAttempt.objects.filter(ip_address=address), settings.SIDEWISP_LOGIN_ADDRESS_LIMIT),
    ]
    last_failures = [
        found["last"]
        for found, limit in (
            (qs.aggregate(failures=Sum("failures_since_start"), last=Max("attempt_time")), limit)
            for qs, limit in counts
        )
        if (found["failures"] or 0) >= limit and found["last"] is not None
    ]
    return max(last_failures, default=timezone.now()) + settings.AXES_COOLOFF_TIME


def _cooloff_minutes() -> int:
    return int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
