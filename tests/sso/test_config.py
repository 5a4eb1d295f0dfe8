"""Single sign-on's settings: off when unset, every variable checked at start-up with a message naming it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from receipts.org.roles import ROLES
from sidewisp.sso.config import ROLE_NAMES, Grant, SsoConfig, from_environment, parse_group_map, parse_issuer
from tests.sso.conftest import BASE_DIR

SECRET = "s3cret-that-must-never-be-printed-91f2"
ALL = {
    "SIDEWISP_OIDC_ISSUER": "https://login.example.com/realms/ops",
    "SIDEWISP_OIDC_CLIENT_ID": "sidewisp",
    "SIDEWISP_OIDC_CLIENT_SECRET": SECRET,
    "SIDEWISP_OIDC_GROUP_MAP": '{"sre": "operator"}',
}


@pytest.fixture
def environment(monkeypatch):
    for name in [*ALL, "SIDEWISP_OIDC_SCOPES", "SIDEWISP_OIDC_GROUPS_CLAIM", "SIDEWISP_OIDC_SIGN_ALGORITHM"]:
        monkeypatch.delenv(name, raising=False)

    def set_all(**changes: str) -> None:
        for name, value in (ALL | changes).items():
            monkeypatch.setenv(name, value)

    return set_all


def refusal() -> str:
    with pytest.raises(ImproperlyConfigured) as refused:
        from_environment()
    return str(refused.value)


def test_the_role_names_are_the_roles_of_receipts():
    assert set(ROLE_NAMES) == set(ROLES)


def test_it_is_off_when_no_variable_is_set(environment):
    assert from_environment() is None


def test_it_reads_a_whole_configuration(environment):
    environment(SIDEWISP_OIDC_SCOPES="openid email profile groups", SIDEWISP_OIDC_GROUPS_CLAIM="roles")
    config = from_environment()
    assert config.issuer == "https://login.example.com/realms/ops"
    assert config.scopes == "openid email profile groups"
    assert config.groups_claim == "roles"
    assert config.group_map.resolve(["sre", "unknown"]) == Grant(frozenset({"operator"}))
    assert SECRET not in repr(config)


def test_a_client_without_an_issuer_names_the_missing_variable(environment, monkeypatch):
    monkeypatch.setenv("SIDEWISP_OIDC_CLIENT_ID", "sidewisp")
    assert "SIDEWISP_OIDC_ISSUER must be set when SIDEWISP_OIDC_CLIENT_ID is" in refusal()


def test_an_issuer_without_a_secret_names_the_missing_variable(environment, monkeypatch):
    environment()
    monkeypatch.delenv("SIDEWISP_OIDC_CLIENT_SECRET")
    assert refusal() == "SIDEWISP_OIDC_CLIENT_SECRET must be set when SIDEWISP_OIDC_ISSUER is"


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"SIDEWISP_OIDC_ISSUER": "http://login.example.com"}, "SIDEWISP_OIDC_ISSUER must be the identity provider's"),
        ({"SIDEWISP_OIDC_SCOPES": "email profile"}, "SIDEWISP_OIDC_SCOPES must be space-separated scopes including"),
        ({"SIDEWISP_OIDC_GROUP_MAP": "sre=operator"}, "SIDEWISP_OIDC_GROUP_MAP must be a JSON object"),
        ({"SIDEWISP_OIDC_GROUP_MAP": '{"sre": "boss"}'}, 'group "sre" maps to unknown role "boss"'),
        ({"SIDEWISP_OIDC_GROUPS_CLAIM": "my groups"}, "SIDEWISP_OIDC_GROUPS_CLAIM must be a claim name"),
        ({"SIDEWISP_OIDC_SIGN_ALGORITHM": "none"}, "SIDEWISP_OIDC_SIGN_ALGORITHM must be one of RS256"),
    ],
)
def test_a_bad_value_is_refused_naming_it_and_never_the_secret(environment, changes, says):
    environment(**changes)
    message = refusal()
    assert says in message
    assert SECRET not in message


@pytest.mark.parametrize(
    ("document", "says"),
    [
        ({}, "must be a non-empty JSON object"),
        ({"sre": 3}, 'group "sre" must map to a role, a list of roles or'),
        ({"sre": {"roles": ["operator"], "members": ["x"]}}, 'group "sre" must map to a role'),
        ({"sre": {"teams": ["Payments Team"]}}, 'maps to team "Payments Team", which is not a team slug'),
        ({"sre": {"roles": [1]}}, 'group "sre" roles must be a name or a list of names'),
        ({"": "viewer"}, "has an empty or over-long group name"),
    ],
)
def test_a_group_map_says_what_is_wrong_with_it(document, says):
    with pytest.raises(ImproperlyConfigured) as refused:
        parse_group_map("SIDEWISP_OIDC_GROUP_MAP", json.dumps(document))
    assert str(refused.value).startswith("SIDEWISP_OIDC_GROUP_MAP")
    assert says in str(refused.value)


def test_a_group_map_gives_the_union_of_the_groups_a_person_is_in():
    groups = parse_group_map(
        "SIDEWISP_OIDC_GROUP_MAP",
        json.dumps({"sre": {"roles": ["operator"], "teams": ["payments"]}, "leads": ["approver", "viewer"]}),
    )
    assert groups.resolve(["leads", "sre"]) == Grant(
        frozenset({"operator", "approver", "viewer"}), frozenset({"payments"})
    )
    assert groups.resolve(["everyone"]) == Grant()


def test_an_issuer_on_loopback_may_be_plain_http():
    assert parse_issuer("X", "http://127.0.0.1:8080/o") == "http://127.0.0.1:8080/o"
    with pytest.raises(ImproperlyConfigured):
        parse_issuer("X", "https://user:pw@login.example.com")


def test_a_bad_group_map_stops_the_process_at_start_up():
    env = {"PATH": "/usr/bin:/bin", "DEBUG": "1", "SIDEWISP_DEV_SETTINGS": "off"} | ALL
    env["SIDEWISP_OIDC_GROUP_MAP"] = '{"sre": "boss"}'
    started = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120
    )
    assert started.returncode != 0
    assert 'SIDEWISP_OIDC_GROUP_MAP: group "sre" maps to unknown role "boss"' in started.stderr
    assert SECRET not in started.stderr + started.stdout


@pytest.mark.django_db
def test_when_off_there_is_no_button_and_the_urls_answer_404(settings):
    settings.SIDEWISP_OIDC = None
    client = Client()
    assert "Sign in with" not in client.get("/login/").content.decode()
    assert client.get("/sso/login/").status_code == 404
    assert client.get("/sso/callback/?code=a&state=b").status_code == 404


@pytest.mark.django_db
def test_the_password_form_never_reaches_the_identity_provider(settings, django_user_model):
    # A local log-in posted with a code and a state in its query string is a local log-in and nothing more.
    settings.SIDEWISP_OIDC = SsoConfig(
        issuer="http://127.0.0.1:9/o",
        client_id="x",
        client_secret="y",
        group_map=parse_group_map("M", '{"sre": "operator"}'),
        timeout=0.5,
    )
    django_user_model.objects.create_user("viewer-person", password="a long local password 7")
    response = Client().post(
        "/login/?code=abc&state=def", {"username": "viewer-person", "password": "a long local password 7"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/"
