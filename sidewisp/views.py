"""The operator pages. Each view serves its page, or just its fragment to htmx."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from receipts import actions, retention
from receipts.models import RetentionPolicy
from receipts.org import teams
from receipts.workers.runtime import current as current_runtime
from sidewisp import forms, pages
from sidewisp.ops import health, writers
from sidewisp.pages import PageScope, auditcsv, decidedpage
from sidewisp.web.access import action_login_required, viewer_required

# Every URL that accepts POST is an operator action with a declared policy (a test enumerates the
# URL patterns and fails on a POST URL missing here or in NOT_ACTIONS).
ACTION_POLICIES: dict[str, actions.Policy] = {
    "sidewisp:wait-decide": actions.DECIDE_WAIT,
    "sidewisp:waits-batch-decide": actions.DECIDE_WAIT,  # each wait decided on its own (issue 30 §7)
    "sidewisp:wait-reassign": actions.REASSIGN_WAIT,
    "sidewisp:wait-cancel": actions.CANCEL_WAIT,
    "sidewisp:task-reopen": actions.REOPEN_TASK,
    "sidewisp:task-verify": actions.VERIFY_TASK,
    "sidewisp:task-accept": actions.ACCEPT_TASK,
    "sidewisp:task-resolve": actions.RESOLVE_TASK,
    "sidewisp:run-stop": actions.STOP_RUN,
    "sidewisp:run-resume": actions.RESUME_RUN,
    "sidewisp:run-retry": actions.RETRY_RUN,
    "sidewisp:run-create": actions.START_RUN,
    "sidewisp:run-declare": actions.DECLARE_ROUTES,
}
# POST URLs that are not operator actions, and what protects them instead.
NOT_ACTIONS = {
    "login": "Django's login view (CSRF, password, django-axes throttling)",
    "logout": "Django's logout view (CSRF)",
    "admin:": "the Django admin (CSRF, is_staff and model permissions; AuditEntry read-only)",
    # issue 14 §4: the receipts API (sidewisp.api)
    "api:receipts": "a source token scoped to its own runs (no session, so no CSRF); rate-limited",
    "api:decision-claim": "a source token scoped to its own runs; the claim is atomic and audited",
}
# What each confirmation page confirms, and the policy it is checked against.
CONFIRMS: dict[str, actions.Policy] = {
    "approve": actions.DECIDE_WAIT,
    "reject": actions.DECIDE_WAIT,
    "edit": actions.DECIDE_WAIT,
    "reassign": actions.REASSIGN_WAIT,
    "cancel": actions.CANCEL_WAIT,
    "reopen": actions.REOPEN_TASK,
    "verify": actions.VERIFY_TASK,
    "accept": actions.ACCEPT_TASK,
    "resolve": actions.RESOLVE_TASK,
    "stop": actions.STOP_RUN,
    "resume": actions.RESUME_RUN,
    "retry": actions.RETRY_RUN,
}
_STATUS = {"done": 200, "noop": 200, "denied": 403, "not_found": 404, "refused": 409}


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
    # Degraded (beat only) is still 200: a load balancer must not take a serving web process out for it.
    checks = health.overall()
    state = health.status(checks)
    body = {"status": state, "ok": state == health.OK, "checks": checks}
    return JsonResponse(body, status=503 if state == health.DOWN else 200)


@require_GET
@viewer_required
def overview(request: HttpRequest) -> HttpResponse:
    window, team = request.GET.get("window", ""), request.GET.get("team", "")
    scope = PageScope("overview", query=urlencode({k: v for k, v in (("window", window), ("team", team)) if v}))
    return _page(request, "overview", pages.overview_context(request.user, window, team), scope)


@require_GET
@viewer_required
def runs(request: HttpRequest) -> HttpResponse:
    # A search for exactly one operation or handoff id opens it (the header search lands here).
    if url := pages.exact_match_url(request.GET, request.user):
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    if query := pages.too_deep_query(request.GET):
        return redirect(f"{request.path}{query}")
    context = pages.runs_context(request.GET, request.user)
    return _page(request, "runs", context, PageScope("runs", query=request.GET.urlencode()))


@require_GET
@viewer_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    visible = teams.visible_runs(request.user)
    run = get_object_or_404(visible, pk=pk)  # another team's run: 404, like none
    context = pages.run_context(run, request.user, request.GET.get("page", 1), visible)
    return _page(request, "run", context, PageScope("run", run_id=run.pk, query=request.GET.urlencode()))


@require_GET
@viewer_required
def waits(request: HttpRequest) -> HttpResponse:
    mine = request.GET.get("mine") == "1"
    page, team = request.GET.get("page", 1), request.GET.get("team", "")
    context = pages.waits_context(request.user, mine=mine, page=page, team=team)
    return _page(request, "waits", context, PageScope("waits", mine=mine, query=request.GET.urlencode()))


@require_GET
@viewer_required
def false_completions(request: HttpRequest) -> HttpResponse:
    context = pages.false_context(request.user, request.GET.get("page", 1))
    return _page(request, "false_completions", context, PageScope("false", query=request.GET.urlencode()))


@require_GET
@viewer_required
def system(request: HttpRequest) -> HttpResponse:
    # The workers as beat's status task last found them, with its age: no ping on a request.
    context = {"checks": health.shown(), "retention": retention.last_run(), "policy": RetentionPolicy.current()}
    context["writers"] = writers.shown()  # each process's evidence writer, as it last reported it
    return _page(request, "system", context)


@require_GET
@login_required
def confirm(request: HttpRequest, what: str, pk: int) -> HttpResponse:
    """Say exactly what an action will do, with the form that does it.

    Checked like the action, but not audited: opening a page is not an attempt (the POST is).
    """
    policy = CONFIRMS.get(what)
    if policy is None:
        raise Http404
    found = actions.look(request.user, policy, pk)
    if not found.ok:
        return _result(request, found, recorded=False)
    form = _form_for(what, found, initial={"key": forms.new_key()})
    return render(request, "sidewisp/confirm.html", pages.confirm_context(what, found, form))


@require_POST
@action_login_required
def wait_decide(request: HttpRequest, pk: int) -> HttpResponse:
    kind = request.POST.get("decision", "")
    what = kind if kind in actions.DECISION_KINDS else "approve"
    found = actions.check(request.user, actions.DECIDE_WAIT, pk, action=_action_name(actions.DECIDE_WAIT, kind))
    if not found.ok:
        return _result(request, found)
    form = _form_for(what, found, data=request.POST)
    if not form.is_valid():
        return render(request, "sidewisp/confirm.html", pages.confirm_context(what, found, form), status=400)
    data = form.cleaned_data
    result = actions.decide(
        user=request.user,
        handoff_id=pk,
        kind=data["decision"],
        token=data["token"],
        key=data["key"],
        reason=data["reason"],
        edited_args=data.get("edited_args"),
    )
    return decidedpage.redirect_to_result(request, pk, data["key"], result)  # a reload never decides again


@require_POST
@action_login_required
def wait_reassign(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(
        request,
        "reassign",
        pk,
        lambda d: actions.reassign(
            user=request.user,
            handoff_id=pk,
            owner=d["owner"],
            deadline_minutes=d["deadline_minutes"],
            key=d["key"],
            reason=d["reason"],
        ),
    )


@require_POST
@action_login_required
def wait_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(
        request,
        "cancel",
        pk,
        lambda d: actions.cancel(user=request.user, handoff_id=pk, key=d["key"], reason=d["reason"]),
    )


@require_POST
@action_login_required
def task_reopen(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(
        request,
        "reopen",
        pk,
        lambda d: actions.reopen(user=request.user, handoff_id=pk, key=d["key"], reason=d["reason"]),
    )


@require_POST
@action_login_required
def task_verify(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(
        request,
        "verify",
        pk,
        lambda d: actions.verify_again(user=request.user, handoff_id=pk, key=d["key"], reason=d["reason"]),
    )


@require_POST
@action_login_required
def task_accept(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(
        request,
        "accept",
        pk,
        lambda d: actions.settle(user=request.user, handoff_id=pk, how="accept", key=d["key"], reason=d["reason"]),
    )


@require_POST
@action_login_required
def task_resolve(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(
        request,
        "resolve",
        pk,
        lambda d: actions.settle(user=request.user, handoff_id=pk, how="resolve", key=d["key"], reason=d["reason"]),
    )


@require_POST
@action_login_required
def run_retry(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(
        request, "retry", pk, lambda d: actions.retry(user=request.user, run_id=pk, key=d["key"], reason=d["reason"])
    )


@require_POST
@action_login_required
def run_stop(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(
        request,
        "stop",
        pk,
        lambda d: actions.stop_auto_continue(user=request.user, run_id=pk, key=d["key"], reason=d["reason"]),
    )


@require_POST
@action_login_required
def run_resume(request: HttpRequest, pk: int) -> HttpResponse:
    return _act(
        request,
        "resume",
        pk,
        lambda d: actions.resume_auto_continue(user=request.user, run_id=pk, key=d["key"], reason=d["reason"]),
    )


@require_GET
@login_required
def run_start(request: HttpRequest) -> HttpResponse:
    """The form that starts a hosted run (checked like the action it posts to; opening it is not audited)."""
    if not actions.may(request.user, actions.START_RUN):
        found = actions.Result(actions.Outcome.DENIED, actions.denial(request.user, actions.START_RUN))
        return _result(request, found, recorded=False)
    graphs = teams.graphs_usable(request.user, current_runtime().graphs())  # the user's teams' (issue 22 §2)
    form = forms.StartRunForm(graphs=graphs, initial={"key": forms.new_key()})
    # The page says which graphs this web process knows: workers read their own SIDEWISP_GRAPHS.
    known = {"graphs_from_setting": bool(str(settings.SIDEWISP_GRAPHS).strip())}
    return render(request, "sidewisp/run_start.html", {"form": form, "graphs_known": known})


@require_POST
@action_login_required
def run_create(request: HttpRequest) -> HttpResponse:
    found = actions.check_start(request.user)
    if not found.ok:
        return _result(request, found)
    # Only the user's teams' graphs are choices: another team's is refused as an unknown name is (issue 29 §3).
    form = forms.StartRunForm(request.POST, graphs=teams.graphs_usable(request.user, current_runtime().graphs()))
    if not form.is_valid():
        return render(request, "sidewisp/run_start.html", {"form": form}, status=400)
    data = form.cleaned_data
    result = actions.start_run(
        user=request.user,
        graph=data["graph"],
        graph_input=data["graph_input"],
        key=data["key"],
        operation_id=data["operation_id"],
        reason=data["reason"],
    )
    if result.outcome == actions.Outcome.REFUSED:
        form.add_error(None, result.message)
        return render(request, "sidewisp/run_start.html", {"form": form}, status=409)
    if not result.ok:
        return _result(request, result)
    level = messages.SUCCESS if result.outcome == actions.Outcome.DONE else messages.INFO
    messages.add_message(request, level, result.message)
    return redirect("sidewisp:run-detail", result.run.pk)


@require_GET
@login_required
def audit_log(request: HttpRequest) -> HttpResponse:
    if not actions.may_read_audit(request.user):
        raise PermissionDenied(actions.AUDIT_DENIAL)
    if query := pages.too_deep_query(request.GET):
        return redirect(f"{request.path}{query}")
    return render(request, "sidewisp/audit.html", pages.audit_context(request.GET, request.user))


@require_GET
@login_required
def audit_csv(request: HttpRequest) -> StreamingHttpResponse:
    if not actions.may_read_audit(request.user):
        raise PermissionDenied(actions.AUDIT_DENIAL)
    chunks = auditcsv.chunks(request.GET, request.user)  # the user's teams' entries only (issue 22 §2)
    response = StreamingHttpResponse(chunks, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="sidewisp-audit.csv"'
    return response


def _act(request: HttpRequest, what: str, pk: int, perform: Callable[[dict], actions.Result]) -> HttpResponse:
    # Permission first (a denied user learns nothing from form errors), then the form, then the action,
    # which checks again under the row lock at execution time.
    policy = CONFIRMS[what]
    found = actions.check(request.user, policy, pk)
    if not found.ok:
        return _result(request, found)
    form = _form_for(what, found, data=request.POST)
    if not form.is_valid():
        return render(request, "sidewisp/confirm.html", pages.confirm_context(what, found, form), status=400)
    return _result(request, perform(form.cleaned_data))


def _form_for(what: str, found: actions.Result, **kwargs) -> forms.ActionForm:
    policy = CONFIRMS[what]
    if policy is actions.DECIDE_WAIT:
        wait = found.handoff.wait_part or {}
        kwargs["initial"] = {**kwargs.get("initial", {}), "decision": what, "token": wait.get("resume_token_id")}
        pending = pages.pending_call(found.run) if what == "edit" else None
        schema = pending.arg_schema if pending else {}
        return forms.DecisionForm(arg_types=pending.arg_types if pending else {}, arg_schema=schema, **kwargs)
    if policy is actions.REASSIGN_WAIT:
        return forms.ReassignForm(**kwargs)
    return forms.ActionForm(reason_required=policy.reason_required, **kwargs)


def _action_name(policy: actions.Policy, what: str) -> str:
    return f"wait.{what}" if policy is actions.DECIDE_WAIT and what in actions.DECISION_KINDS else policy.name


def _result(request: HttpRequest, result: actions.Result, *, recorded: bool = True) -> HttpResponse:
    context = pages.result_context(result, request.user)
    context["recorded"] = recorded  # a refused POST is in the audit log; a page only looked at is not
    return render(request, "sidewisp/action_result.html", context, status=_STATUS[result.outcome])


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The 403 page: what is missing, in words (the PermissionDenied's message, or the viewer permission)."""
    why = str(exception or "") or "Your account may not open this page."
    return render(request, "sidewisp/403.html", {"why": why}, status=403)
