"""The single-sign-on pages: the log-in page's button, the start of a sign-in, and its callback.

Off (SIDEWISP_OIDC_ISSUER unset), the log-in page has no button and both URLs answer 404. Every way a
sign-in can fail ends on a page that says why in words, with a link back to the log-in page.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.contrib import auth
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render, resolve_url
from django.views.generic import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from sidewisp.sso import discovery
from sidewisp.sso.config import SsoConfig
from sidewisp.sso.outcomes import NoRole, SignInRefused

logger = logging.getLogger(__name__)
BACKEND = "sidewisp.sso.backend.SsoBackend"
PROVIDER_ERROR = re.compile(r"^[a-z_]{1,40}$")


class LoginView(auth_views.LoginView):
    """Django's log-in page, with a "Sign in with …" button when single sign-on is on."""

    def get_context_data(self, **kwargs: object) -> dict:
        return super().get_context_data(**kwargs) | {"sso": settings.SIDEWISP_OIDC}


class SignInStart(OIDCAuthenticationRequestView):
    """GET /sso/login/: state, nonce and PKCE into the session, then off to the identity provider."""

    def __init__(self, **kwargs: object) -> None:
        View.__init__(self, **kwargs)  # the library's reads settings we only have per request

    def get_settings(self, attr: str, *default: object) -> object:
        options = _config().library_options()
        return options[attr] if attr in options else (default[0] if default else None)

    def get(self, request: HttpRequest) -> HttpResponse:
        config = _config()
        try:
            self.OIDC_OP_AUTH_ENDPOINT = discovery.provider(config).authorization_endpoint
        except SignInRefused as refusal:
            return refused(request, refusal)
        self.OIDC_RP_CLIENT_ID = config.client_id
        return super().get(request)


class SignInCallback(OIDCAuthenticationCallbackView):
    """GET /sso/callback/: the state must be this browser's own and unused; then the backend decides."""

    def get(self, request: HttpRequest) -> HttpResponse:
        config = _config()
        pending = _take_state(request)
        if error := request.GET.get("error"):
            shown = error if PROVIDER_ERROR.match(error) else "an error"
            return refused(request, SignInRefused("provider_error", error=shown))
        if pending is None or not request.GET.get("code"):
            return refused(request, SignInRefused("state"))
        try:
            user = auth.authenticate(request=request, sidewisp_sso=True, **pending)
        except SignInRefused as refusal:
            return refused(request, refusal)
        except NoRole as no_role:
            return _no_role(request, config, no_role)
        if user is None:  # the login throttle refused this address
            return refused(request, SignInRefused("throttled"))
        auth.login(request, user, backend=BACKEND)
        request.session.set_expiry(config.session_hours * 3600)
        next_url = request.session.pop("oidc_login_next", None)
        return HttpResponseRedirect(next_url or resolve_url(settings.LOGIN_REDIRECT_URL))


def refused(request: HttpRequest, refusal: SignInRefused) -> HttpResponse:
    """The refusal page: what happened in words; the log line names only the refusal's code."""
    logger.warning("single sign-on refused: %s", refusal.code)
    context = {"words": refusal.words, "sso": settings.SIDEWISP_OIDC}
    return render(request, "registration/sso_refused.html", context, status=refusal.status)


def _no_role(request: HttpRequest, config: SsoConfig, no_role: NoRole) -> HttpResponse:
    logger.info("single sign-on: no Sidewisp role for an identity provider account")
    if request.user.is_authenticated:
        auth.logout(request)  # whoever was logged in here, this browser now belongs to someone with no role
    context = {"username": no_role.username, "groups": no_role.groups[:20], "sso": config}
    return render(request, "registration/sso_no_role.html", context, status=403)


def _take_state(request: HttpRequest) -> dict | None:
    """This state's nonce and PKCE verifier, removed from the session so that it works once."""
    state = request.GET.get("state")
    states = request.session.get("oidc_states") or {}
    pending = states.pop(state, None) if isinstance(state, str) else None
    if pending is not None:
        request.session["oidc_states"] = states
        request.session.save()
        return {"nonce": pending.get("nonce"), "code_verifier": pending.get("code_verifier")}
    return None


def _config() -> SsoConfig:
    if settings.SIDEWISP_OIDC is None:
        raise Http404("single sign-on is not configured")
    return settings.SIDEWISP_OIDC
