"""Single sign-on against a real OpenID Connect provider (django-oauth-toolkit, its own process on loopback)."""

from __future__ import annotations

import pytest

from tests.sso.conftest import sign_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_alice_signs_in_as_an_operator(sso, live_server):
    response = sign_in(live_server, "alice")
    assert response.status_code == 200, response.text[-2000:]
    assert response.url == f"{live_server.url}/"
