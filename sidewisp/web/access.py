"""Who may open the operator pages and post their actions, checked before a view runs."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from receipts import actions

VIEWER_PERMISSION = "receipts.view_dashboard"


def viewer_required(view: Callable) -> Callable:
    """Anonymous users go to the login page; users without the viewer permission get a 403 that says so."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.has_perm(VIEWER_PERMISSION):
            raise PermissionDenied(actions.needs("Seeing the operator pages", (VIEWER_PERMISSION,)))
        return view(request, *args, **kwargs)

    return login_required(wrapper)


def action_login_required(view: Callable) -> Callable:
    """An action answers an anonymous POST with 403 before anything is checked, audited or changed.

    (A denied attempt by a user is audited; an anonymous one would let anyone fill the audit log.)
    """

    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_authenticated:
            return render(request, "registration/login_required.html", status=403)
        return view(request, *args, **kwargs)

    return wrapper
