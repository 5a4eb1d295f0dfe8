"""The provider's claims: each person's groups from the people file, and the token faults the tests ask for."""

from __future__ import annotations

import json
import os
import time

from oauth2_provider.oauth2_validators import OAuth2Validator

# fault: what the ID token of that person gets wrong (signed with the provider's real key all the same).
FAULTS = {
    "wrong-audience": lambda claims: claims | {"aud": "another-application"},
    "expired": lambda claims: claims | {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200},
    "wrong-issuer": lambda claims: claims | {"iss": claims["iss"] + "/elsewhere"},
    "stale-nonce": lambda claims: claims | {"nonce": "the-nonce-of-an-earlier-sign-in"},
}


def people() -> dict:
    with open(os.environ["IDP_PEOPLE"]) as file:
        return json.load(file)


class Validator(OAuth2Validator):
    oidc_claim_scope = OAuth2Validator.oidc_claim_scope | {"groups": "openid"}

    def get_additional_claims(self, request) -> dict:
        person = people().get(request.user.username, {})
        return {
            "preferred_username": request.user.username,
            "email": f"{request.user.username}@example.com",
            "given_name": request.user.username.title(),
            "groups": person.get("groups", []),
        }

    def get_id_token_dictionary(self, token, token_handler, request):
        # The ID token is these claims merged over oauthlib's (aud, iat, nonce): a fault here replaces those too.
        claims, expires = super().get_id_token_dictionary(token, token_handler, request)
        fault = people().get(request.user.username, {}).get("fault")
        return (FAULTS[fault](claims) if fault else claims), expires
