"""The operator pages. Each view serves its page, or just its fragment to htmx."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from receipts.models import Run
from sidewisp import health, pages
from sidewisp.pages import PageScope


def viewer_required(view: Callable) -> Callable:
    """Anonymous users go to the login page; users without the viewer permission get a 403."""
    return login_required(permission_required(pages.VIEWER_PERMISSION, raise_exception=True)(view))


def _page(request: HttpRequest, name: str, context: dict, scope: PageScope | None = None) -> HttpResponse:
    # One view, two shapes: the full page, or for htmx (not boosted) just the fragment.
    partial = request.htmx and not request.htmx.boosted
    template = f"sidewisp/_{name}.html" if partial else f"sidewisp/{name}.html"
    context["ws_url"] = scope.ws_url() if scope else None
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


@require_GET
@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    checks = health.overall()
    ok = all(check["ok"] for check in checks.values())
    return JsonResponse({"ok": ok, "checks": checks}, status=200 if ok else 503)


@require_GET
@viewer_required
def overview(request: HttpRequest) -> HttpResponse:
    return _page(request, "overview", pages.overview_context(), PageScope("overview"))


@require_GET
@viewer_required
def runs(request: HttpRequest) -> HttpResponse:
    context = pages.runs_context(request.GET)
    return _page(request, "runs", context, PageScope("runs", query=request.GET.urlencode()))


@require_GET
@viewer_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_object_or_404(Run, pk=pk)
    return _page(request, "run", pages.run_context(run), PageScope("run", run_id=run.pk))


@require_GET
@viewer_required
def waits(request: HttpRequest) -> HttpResponse:
    mine = request.GET.get("mine") == "1"
    context = pages.waits_context(request.user.get_username() if mine else None)
    return _page(request, "waits", context, PageScope("waits", mine=mine))


@require_GET
@viewer_required
def false_completions(request: HttpRequest) -> HttpResponse:
    return _page(request, "false_completions", pages.false_context(), PageScope("false"))


@require_GET
@viewer_required
def system(request: HttpRequest) -> HttpResponse:
    # Not on the socket: a worker ping can take a second, so the page polls it instead.
    return _page(request, "system", {"checks": health.overall()})


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "sidewisp/403.html", status=403)
