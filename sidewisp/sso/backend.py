"""The authentication backend of single sign-on: mozilla-django-oidc's code exchange, with the checks it leaves out.

mozilla-django-oidc exchanges the code (with PKCE), fetches the provider's keys and checks the ID token's
signature and nonce. It does not check the audience, the issuer or that the claims it needs are there;
`verify_token` here checks all of them. Accounts are found by (issuer, subject), never by e-mail, so an
identity provider can never sign anyone into a local account (sidewisp.sso.accounts).
"""

from __future__ import annotations

import hmac
import logging

import jwt
import requests
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from sidewisp.sso import accounts, discovery
from sidewisp.sso.config import SsoConfig
from sidewisp.sso.outcomes import SignInRefused

logger = logging.getLogger(__name__)
REQUIRED_CLAIMS = ("iss", "aud", "sub", "exp", "iat")
# Clocks of the provider and of this host may differ by this much.
LEEWAY_SECONDS = 60


class SsoBackend(OIDCAuthenticationBackend):
    """Signs in only when the callback view asks (`sidewisp_sso=True`), never from the password form."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        # The library reads its settings here; ours are read per sign-in (single sign-on may be off).
        from django.contrib.auth import get_user_model

        self.UserModel = get_user_model()

    def get_settings(self, attr: str, *default: object) -> object:
        options = self.config.library_options() | {"OIDC_TOKEN_USE_BASIC_AUTH": self.provider.token_auth_basic}
        return options[attr] if attr in options else (default[0] if default else None)

    def authenticate(
        self, request: HttpRequest | None, sidewisp_sso: bool = False, **kwargs: object
    ) -> AbstractBaseUser | None:
        config: SsoConfig | None = settings.SIDEWISP_OIDC
        if not sidewisp_sso or config is None or request is None:
            return None
        self._configure(config, discovery.provider(config))
        try:
            return super().authenticate(request, nonce=kwargs.get("nonce"), code_verifier=kwargs.get("code_verifier"))
        except requests.HTTPError as error:
            status = error.response.status_code if error.response is not None else 0
            raise SignInRefused("code_refused" if 400 <= status < 500 else "unreachable") from None
        except requests.RequestException:
            raise SignInRefused("unreachable") from None

    def verify_token(self, token: str | None, **kwargs: object) -> dict:
        """The ID token's claims once its signature, issuer, audience, times, subject and nonce all hold."""
        if not token:
            raise SignInRefused("no_id_token")
        claims = self._decode(token)
        if not isinstance(claims["sub"], str) or not 0 < len(claims["sub"]) <= 255:
            raise SignInRefused("claims", claim="sub")
        nonce = kwargs.get("nonce")
        if not isinstance(nonce, str) or not hmac.compare_digest(str(claims.get("nonce", "")), nonce):
            raise SignInRefused("nonce")
        audience = claims["aud"]
        if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != self.config.client_id:
            raise SignInRefused("audience")
        return claims

    def get_userinfo(self, access_token: str, id_token: str, payload: dict) -> dict:
        """The userinfo endpoint's claims (when it has one), which must name the ID token's subject."""
        if not self.provider.userinfo_endpoint or not access_token:
            return {}
        response = requests.get(
            self.provider.userinfo_endpoint,
            headers={"Authorization": f"Bearer {access_token}"},
            timeout=self.config.timeout,
            allow_redirects=False,
        )
        if response.status_code != 200:
            raise SignInRefused("userinfo")
        try:
            info = response.json()
        except ValueError:
            raise SignInRefused("userinfo") from None
        if not isinstance(info, dict) or info.get("sub") != payload["sub"]:
            raise SignInRefused("subject")
        return info

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict) -> AbstractBaseUser:
        # The ID token's verified claims win over the userinfo endpoint's.
        claims = {**self.get_userinfo(access_token, id_token, payload), **payload}
        return accounts.sign_in(self.config, claims)

    def get_user(self, user_id: int) -> AbstractBaseUser | None:
        return ModelBackend.get_user(self, user_id)  # a deactivated account's session ends

    def _configure(self, config: SsoConfig, provider: discovery.Provider) -> None:
        self.config, self.provider = config, provider
        self.OIDC_OP_TOKEN_ENDPOINT = provider.token_endpoint
        self.OIDC_OP_USER_ENDPOINT = provider.userinfo_endpoint
        self.OIDC_OP_JWKS_ENDPOINT = provider.jwks_uri
        self.OIDC_RP_CLIENT_ID = config.client_id
        self.OIDC_RP_CLIENT_SECRET = config.client_secret
        self.OIDC_RP_SIGN_ALGO = config.sign_algorithm
        self.OIDC_RP_IDP_SIGN_KEY = None

    def _decode(self, token: str) -> dict:
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") != self.config.sign_algorithm:
                raise SignInRefused("signature")
            key = self.config.client_secret if self.config.sign_algorithm.startswith("HS") else self._key(token)
            return jwt.decode(
                token,
                key,
                algorithms=[self.config.sign_algorithm],
                audience=self.config.client_id,
                issuer=self.config.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": list(REQUIRED_CLAIMS)},
            )
        except jwt.MissingRequiredClaimError as error:
            raise SignInRefused("claims", claim=error.claim) from None
        except (jwt.InvalidAudienceError, jwt.InvalidIssuerError, jwt.ExpiredSignatureError) as error:
            raise SignInRefused(_REFUSALS[type(error)]) from None
        except (jwt.ImmatureSignatureError, jwt.InvalidIssuedAtError):
            raise SignInRefused("expired") from None
        except jwt.PyJWTError:
            raise SignInRefused("signature") from None

    def _key(self, token: str) -> jwt.PyJWK:
        try:
            return self.retrieve_matching_jwk(token)
        except (SuspiciousOperation, KeyError, TypeError, jwt.PyJWTError):
            raise SignInRefused("signature") from None


_REFUSALS = {
    jwt.InvalidAudienceError: "audience",
    jwt.InvalidIssuerError: "issuer",
    jwt.ExpiredSignatureError: "expired",
}
