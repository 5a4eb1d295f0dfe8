"""Single sign-on against a real OpenID Connect provider (django-oauth-toolkit, its own process on loopback).

The browser is a requests session following redirects: Sidewisp's log-in page → the provider's log-in form →
the provider's authorization endpoint → Sidewisp's callback, which exchanges the code server-to-server.
Personas are the provider's people (tests/sso/conftest.py): alice (sre: operator of team payments), bob
(approvers), carol (no mapped group), ops-lead (also a local account here), and four whose ID tokens are wrong.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from datetime import timedelta

import pytest
import requests
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from receipts.models import AuditEntry, Membership
from receipts.org.identities import SsoIdentity
from sidewisp.asgi import application
from sidewisp.sso.backend import SsoBackend
from tests.sso.conftest import CLIENT_SECRET, PASSWORD, callback_url, sign_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def issued(monkeypatch) -> list[dict]:
    """The token responses Sidewisp received from the provider (the real ones, recorded on their way)."""
    seen: list[dict] = []
    original = SsoBackend.get_token

    def recording(self, payload):
        answer = original(self, payload)
        seen.append(answer)
        return answer

    monkeypatch.setattr(SsoBackend, "get_token", recording)
    return seen


def roles_of(username: str) -> set[str]:
    user = get_user_model().objects.get(username=username)
    return set(user.groups.values_list("name", flat=True))


def claimed_teams_of(username: str) -> set[str]:
    claimed = Membership.objects.filter(user__username=username, origin=Membership.Origin.CLAIM)
    return set(claimed.values_list("team__slug", flat=True))


def opens(browser: requests.Session, live_server, path: str) -> int:
    """The status of a page as this browser sees it (a redirect to the log-in page counts as 302)."""
    return browser.get(f"{live_server.url}{path}", allow_redirects=False, timeout=30).status_code


def test_the_log_in_page_offers_the_identity_provider(sso, live_server):
    page = requests.get(f"{live_server.url}/login/", timeout=30)
    assert 'id="sso-login"' in page.text
    assert "Sign in with Example IdP" in page.text
    assert 'name="password"' in page.text  # the local log-in stays beside it


def test_alice_signs_in_as_an_operator_of_her_team(sso, live_server):
    response = sign_in(live_server, "alice")
    assert response.status_code == 200
    assert response.url == f"{live_server.url}/"
    assert '<span class="who">alice</span>' in response.text
    assert opens(response.browser, live_server, "/audit/") == 200  # an operator reads the audit log
    alice = get_user_model().objects.get(username="alice")
    assert roles_of("alice") == {"operator"}
    assert claimed_teams_of("alice") == {"payments"}
    assert SsoIdentity.objects.get(user=alice).issuer == sso.issuer
    assert not alice.has_usable_password()
    entry = AuditEntry.objects.get(action="sso.roles_changed", object_id="alice")
    assert entry.detail == {"added": ["operator"], "removed": [], "teams_added": ["payments"], "teams_removed": []}


def test_the_admin_role_reads_which_accounts_follow_the_provider(sso, live_server):
    sign_in(live_server, "alice")
    admin = get_user_model().objects.create_user("local-admin", is_staff=True)
    admin.groups.add(Group.objects.get(name="admin"))
    client = Client()
    client.force_login(admin)
    listed = client.get("/admin/receipts/ssoidentity/")
    assert listed.status_code == 200
    assert "alice" in listed.content.decode()
    assert client.get("/admin/receipts/ssoidentity/add/").status_code == 403


def test_a_session_from_the_provider_ends_after_its_hours(sso, live_server):
    from django.contrib.sessions.models import Session

    response = sign_in(live_server, "alice")
    session = Session.objects.get(session_key=response.browser.cookies["sessionid"])
    lasts = session.expire_date - timezone.now()
    assert timedelta(hours=11, minutes=59) < lasts <= timedelta(hours=12)


def test_the_sign_in_returns_to_the_page_asked_for_and_never_elsewhere(sso, live_server):
    assert sign_in(live_server, "bob", next_page="/waits/").url == f"{live_server.url}/waits/"
    assert sign_in(live_server, "bob", next_page="https://evil.example/").url == f"{live_server.url}/"


def test_a_second_sign_in_with_the_same_groups_changes_nothing(sso, live_server):
    sign_in(live_server, "bob")
    again = sign_in(live_server, "bob")
    assert again.url == f"{live_server.url}/"
    assert get_user_model().objects.filter(username="bob").count() == 1
    assert roles_of("bob") == {"approver"}
    assert AuditEntry.objects.filter(action="sso.roles_changed").count() == 1


def test_a_group_removed_at_the_provider_is_a_role_removed_at_the_next_sign_in(sso, live_server, identity_provider):
    first = sign_in(live_server, "alice")
    assert opens(first.browser, live_server, "/audit/") == 200
    identity_provider.set("alice", groups=["approvers"])
    second = sign_in(live_server, "alice")
    assert second.url == f"{live_server.url}/"
    assert roles_of("alice") == {"approver"}
    assert claimed_teams_of("alice") == set()
    # The browser still logged in from the first sign-in lost the operator's pages with the role.
    assert opens(first.browser, live_server, "/audit/") == 403
    assert opens(first.browser, live_server, "/") == 200
    entry = AuditEntry.objects.filter(action="sso.roles_changed", object_id="alice").first()
    assert entry.detail == {
        "added": ["approver"],
        "removed": ["operator"],
        "teams_added": [],
        "teams_removed": ["payments"],
    }


def test_roles_given_locally_outside_the_role_groups_are_kept(sso, live_server, identity_provider):
    sign_in(live_server, "alice")
    on_call = Group.objects.create(name="pager-rota")
    get_user_model().objects.get(username="alice").groups.add(on_call)
    identity_provider.set("alice", groups=["approvers"])
    sign_in(live_server, "alice")
    assert roles_of("alice") == {"approver", "pager-rota"}


def test_someone_whose_groups_give_no_role_sees_a_page_saying_so(sso, live_server):
    response = sign_in(live_server, "carol")
    assert response.status_code == 403
    assert "Signed in at Example IdP as <strong>carol</strong>, but your identity provider gives you no" in (
        response.text
    )
    assert "<code>marketing</code>" in response.text
    assert not get_user_model().objects.filter(username="carol").exists()  # no account for nobody's role
    assert opens(response.browser, live_server, "/") == 302  # not logged in


def test_losing_every_role_at_the_provider_closes_the_open_sockets(sso, live_server, identity_provider, monkeypatch):
    monkeypatch.setattr("sidewisp.live.hub.RESYNC_SECONDS", 0.3)
    first = sign_in(live_server, "alice")
    cookie = (b"cookie", f"sessionid={first.browser.cookies['sessionid']}".encode())
    identity_provider.set("alice", groups=["all-staff"])

    async def body():
        live_socket = WebsocketCommunicator(
            application,
            "/ws/health/?page=overview",
            headers=[(b"host", b"localhost"), (b"origin", b"http://localhost"), cookie],
        )
        assert (await live_socket.connect())[0]
        await live_socket.receive_from(timeout=10)  # the snapshot: alice sees the overview live
        refused = await asyncio.to_thread(sign_in, live_server, "alice")
        assert refused.status_code == 403
        while (await live_socket.receive_output(timeout=10))["type"] != "websocket.close":
            pass

    async_to_sync(body)()
    assert roles_of("alice") == set()
    assert opens(first.browser, live_server, "/") == 403


def test_a_local_account_is_never_signed_into_by_the_provider(sso, live_server):
    local = get_user_model().objects.create_user("ops-lead", password="a long local password 7")
    local.groups.add(Group.objects.get(name="approver"))
    users = get_user_model().objects.count()
    response = sign_in(live_server, "ops-lead")
    assert response.status_code == 403
    assert "names you “ops-lead”, which is a local account here" in response.text
    local.refresh_from_db()
    assert local.has_usable_password()
    assert roles_of("ops-lead") == {"approver"}
    assert not SsoIdentity.objects.exists()
    assert get_user_model().objects.count() == users
    assert opens(response.browser, live_server, "/") == 302


@pytest.mark.parametrize(
    ("person", "says"),
    [
        ("elsewhere", "The ID token was issued for another application, not for this Sidewisp (audience)."),
        ("late", "The ID token has expired"),
        ("impostor", "The ID token was issued by another identity provider than the configured one (issuer)."),
        ("replayer", "The ID token belongs to another sign-in (nonce)"),
    ],
)
def test_a_wrong_id_token_is_refused_with_a_page(sso, live_server, issued, caplog, person, says):
    caplog.set_level(logging.DEBUG)
    response = sign_in(live_server, person)
    assert response.status_code == 403
    assert says in response.text
    assert "Nothing was signed in and no account was changed." in response.text
    assert not get_user_model().objects.filter(username=person).exists()
    assert not SsoIdentity.objects.exists()
    assert opens(response.browser, live_server, "/") == 302
    # Neither the page nor any log line carries a token, the client secret or the password.
    [tokens] = issued
    secrets = [tokens["id_token"], tokens["access_token"], CLIENT_SECRET, PASSWORD]
    logged = "\n".join(f"{record.getMessage()} {record.exc_text or ''}" for record in caplog.records)
    for secret in secrets:
        assert secret not in response.text
        assert secret not in logged
    assert "Traceback" not in response.text
    assert "single sign-on refused" in logged


def test_a_callback_used_twice_is_refused(sso, live_server):
    response = sign_in(live_server, "alice")
    used = callback_url(response)
    again = response.browser.get(used, timeout=30)
    assert again.status_code == 400
    assert "each sign-in link works once (state)" in again.text
    elsewhere = requests.get(used, timeout=30)  # someone else's browser with the captured link
    assert elsewhere.status_code == 400
    assert opens(requests.Session(), live_server, "/") == 302


def test_a_code_used_twice_is_refused_by_the_provider(sso, live_server):
    response = sign_in(live_server, "alice")
    used = callback_url(response)
    # A new sign-in started in the same browser gives it a fresh state; the old code is sent with it.
    started = response.browser.get(f"{live_server.url}/sso/login/", allow_redirects=False, timeout=30)
    state = requests.utils.urlparse(started.headers["Location"]).query.split("state=")[1].split("&")[0]
    code = requests.utils.urlparse(used).query.split("code=")[1].split("&")[0]
    replayed = response.browser.get(f"{live_server.url}/sso/callback/?code={code}&state={state}", timeout=30)
    assert replayed.status_code == 403
    assert "The identity provider refused the code of this sign-in" in replayed.text


def test_a_refusal_at_the_provider_is_a_page(sso, live_server):
    browser = requests.Session()
    started = browser.get(f"{live_server.url}/sso/login/", allow_redirects=False, timeout=30)
    state = started.headers["Location"].split("state=")[1].split("&")[0]
    answer = browser.get(f"{live_server.url}/sso/callback/?error=access_denied&state={state}", timeout=30)
    assert answer.status_code == 403
    assert "it answered “access_denied”" in answer.text
    # The state is spent: the same link cannot be used to finish a sign-in afterwards.
    assert browser.get(f"{live_server.url}/sso/callback/?code=x&state={state}", timeout=30).status_code == 400


def test_a_provider_that_does_not_answer_is_a_page_and_local_log_in_still_works(sso, live_server, settings):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    settings.SIDEWISP_OIDC = dataclasses.replace(sso, issuer=f"http://127.0.0.1:{port}/o")
    answer = requests.get(f"{live_server.url}/sso/login/", timeout=30)
    assert answer.status_code == 503
    assert "The identity provider does not answer" in answer.text
    assert requests.get(f"{live_server.url}/login/", timeout=30).status_code == 200
