"""Who may read /metrics: default deny; a request needs `Authorization: Bearer <SIDEWISP_METRICS_TOKEN>`
or an address in SIDEWISP_METRICS_ALLOW. A refusal carries no data."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.crypto import constant_time_compare


def refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read the metrics; otherwise the refusal, which carries no data."""
    token = settings.SIDEWISP_METRICS_TOKEN
    allowed = settings.SIDEWISP_METRICS_ALLOW
    if not token and not allowed:
        return HttpResponse("Metrics are off: set SIDEWISP_METRICS_TOKEN or SIDEWISP_METRICS_ALLOW.\n", status=403)
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer" and constant_time_compare(presented.strip(), token):
        return None
    if _address_allowed(request.META.get("REMOTE_ADDR", ""), allowed):
        return None
    if token:
        response = HttpResponse("A valid bearer token is required.\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="sidewisp metrics"'
        return response
    return HttpResponse("This address may not read the metrics.\n", status=403)


def _address_allowed(address: str, networks: Iterable) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)
