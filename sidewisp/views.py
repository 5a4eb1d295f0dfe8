from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from sidewisp import health


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    checks = health.overall()
    ok = all(check["ok"] for check in checks.values())
    return JsonResponse({"ok": ok, "checks": checks}, status=200 if ok else 503)


@require_GET
@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "sidewisp/dashboard.html")
