"""The login throttle's two hooks: the lock-out page and its audit entry (django-axes does the counting)."""

from __future__ import annotations

from datetime import datetime

from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Max, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from receipts import audit


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
        "cooloff_minutes": _cooloff_minutes(),
        "until": _locked_until(request, credentials),
    }
    return render(request, "registration/locked_out.html", context, status=429)


def _locked_until(request: HttpRequest, credentials: dict | None) -> datetime:
    """The end of the longest lock that applies: the cool-off after that count's last failure."""
    username = (credentials or {}).get("username") or request.POST.get("username")
    address = getattr(request, "axes_ip_address", None)
    counts = [AccessAttempt.objects.filter(username=username), AccessAttempt.objects.filter(ip_address=address)]
    last_failures = [
        found["last"]
        for found in (qs.aggregate(failures=Sum("failures_since_start"), last=Max("attempt_time")) for qs in counts)
        if (found["failures"] or 0) >= settings.AXES_FAILURE_LIMIT and found["last"] is not None
    ]
    return max(last_failures, default=timezone.now()) + settings.AXES_COOLOFF_TIME


def _cooloff_minutes() -> int:
    return int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
