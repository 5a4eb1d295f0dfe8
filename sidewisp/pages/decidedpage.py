"""A decision's result page after a redirect (issue 21 §4): reloading it never sends the decision again.

The POST that decides a wait answers 303 with this page's address; the page shows what the decision's POST
found (its outcome and message, kept in the decider's own session under the form's one-time key) and, like
the result page it replaces, the run live. No decision value, reason or argument is kept: only the outcome
code and the action's own message.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from receipts import actions
from receipts.models import Handoff
from receipts.org import teams
from sidewisp.pages.confirm import result_context

SESSION_KEY = "sidewisp.pages.decided"
KEPT = 20  # the newest results a session keeps: enough to reload any recent tab
# An action's outcome -> the status its result page answers with (as the POST's own page did).
STATUS = {"done": 200, "noop": 200, "denied": 403, "not_found": 404, "refused": 409}


def redirect_to_result(request: HttpRequest, handoff_pk: int, key: str, result: actions.Result) -> HttpResponse:
    """Keep `result` in the session under the form's `key` and send the browser to its page (303: a GET)."""
    kept = dict(request.session.get(SESSION_KEY, {}))
    kept.pop(key, None)
    kept[key] = {"outcome": result.outcome, "message": result.message}
    request.session[SESSION_KEY] = dict(list(kept.items())[-KEPT:])
    url = f"{reverse('sidewisp:wait-decided', args=[handoff_pk])}?{urlencode({'key': key})}"
    response = HttpResponseRedirect(url)
    response.status_code = 303  # See Other: the browser GETs it, and a reload repeats the GET only
    return response


@require_GET
@login_required
def wait_decided(request: HttpRequest, pk: int) -> HttpResponse:
    """The result of this session's decision `?key=` on wait `pk`: the page its POST redirected to."""
    key = request.GET.get("key", "")
    shown = request.session.get(SESSION_KEY, {}).get(key)
    if shown is None:
        raise Http404("No decision of yours with this key.")
    handoff = teams.scope(Handoff.objects.select_related("run"), request.user, run="run__").filter(pk=pk).first()
    run = handoff.run if handoff is not None else None
    result = actions.Result(shown["outcome"], shown["message"], run=run, handoff=handoff)
    context = result_context(result, request.user)
    context.update(recorded=True, action_key=key)  # the POST was audited; `action_key` names its entry
    return render(request, "sidewisp/action_result.html", context, status=STATUS.get(result.outcome, 200))
