"""Declare what you saw: the POST that stores a drafted contract version (the offer: sidewisp.pages.offers).

receipts.ingest.drafts builds a draft from the run's ROUTE_REJECTED handoffs (the verdicts stay red until a
person declares); receipts.actions.declare stores it (change-limits permission, CSRF, idempotency key, audit).
Nobody else is offered the form, and its POST answers them 403.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from receipts import actions
from sidewisp import forms
from sidewisp.pages.confirm import result_context
from sidewisp.web.access import action_login_required

STATUS = {"done": 200, "noop": 200, "denied": 403, "not_found": 404, "refused": 409}


@require_POST
@action_login_required
def run_declare(request: HttpRequest, pk: int) -> HttpResponse:
    """Declare what the run showed: store the drafted contract version its page offered."""
    found = actions.check(request.user, actions.DECLARE_ROUTES, pk)
    if found.ok:
        form = forms.DeclareForm(data=request.POST)
        if not form.is_valid():
            why = f"The declaration is missing or has a bad {', '.join(sorted(form.errors))}."
            return render(request, "sidewisp/bad_request.html", {"why": why}, status=400)
        data = form.cleaned_data
        found = actions.declare_routes(
            user=request.user,
            run_id=pk,
            version=data["version"],
            digest=data["digest"],
            key=data["key"],
            reason=data["reason"],
        )
    context = {**result_context(found, request.user), "recorded": True}
    return render(request, "sidewisp/action_result.html", context, status=STATUS[found.outcome])
