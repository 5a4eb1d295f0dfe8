"""The batch decision's confirm page and its POST (issue 30 §7); the work is sidewisp.pages.batch's."""

from __future__ import annotations

from django import forms as django_forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from sidewisp import forms
from sidewisp.pages import batch
from sidewisp.web.access import action_login_required

MAX_SIGNED = 20_000


class BatchForm(forms.ActionForm):
    """The batch's decision (approve or reject), what its page showed (signed), one key and one reason."""

    batch = django_forms.CharField(max_length=MAX_SIGNED, widget=django_forms.HiddenInput)


def _refused(request: HttpRequest, why: str) -> HttpResponse:
    return render(request, "sidewisp/bad_request.html", {"why": why}, status=400)


@require_GET
@login_required
def waits_batch(request: HttpRequest) -> HttpResponse:
    """Confirm deciding the picked waits: each with its arguments, and those left out named with why."""
    kind = request.GET.get("decision", "")
    try:
        found = batch.build(request.user, kind, request.GET.getlist("wait"))
    except batch.BadBatch as exc:
        return _refused(request, str(exc))
    form = BatchForm(initial={"key": forms.new_key(), "batch": found.signed}, reason_required=kind == "reject")
    context = {"batch": found, "form": form, "now": timezone.now(), "title": f"{kind.capitalize()} {found.tool}"}
    return render(request, "sidewisp/waits_batch.html", context)


@require_POST
@action_login_required
def waits_batch_decide(request: HttpRequest) -> HttpResponse:
    """Decide each wait of the batch on its own (checked, applied and audited), naming those left out."""
    form = BatchForm(request.POST, reason_required=False)
    if not form.is_valid():
        problems = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in form.errors.items())
        return _refused(request, f"The batch form is not valid ({problems}).")
    data = form.cleaned_data
    try:
        kind, outcomes = batch.apply(request.user, data["batch"], data["key"], data["reason"])
    except batch.BadBatch as exc:
        return _refused(request, str(exc))
    context = {
        "kind": kind,
        "applied": [o for o in outcomes if o.outcome == "done"],
        "repeated": [o for o in outcomes if o.outcome == "noop"],
        "left_out": [o for o in outcomes if o.outcome not in ("done", "noop")],
        "now": timezone.now(),
    }
    # Denied every one (a role that decides none of them): answered as a denial, each audited as such.
    denied = bool(outcomes) and all(o.outcome in ("denied", "not_found") for o in outcomes)
    return render(request, "sidewisp/waits_batch_result.html", context, status=403 if denied else 200)
