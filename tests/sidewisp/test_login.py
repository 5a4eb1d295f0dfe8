"""Nothing anonymous reaches an action or the audit log, and guessing passwords is throttled (django-axes)."""

from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.urls import reverse

from receipts.models import AuditEntry, Decision, Handoff, Run
from sidewisp.views import ACTION_POLICIES
from tests.sidewisp.test_actions_matrix import people, target  # noqa: F401 - fixtures: each action's URL and data

PASSWORD = "pw-for-tests-only-1"
LOGIN = "/login/"


def _state() -> tuple:
    return (
        AuditEntry.objects.count(),
        Decision.objects.count(),
        list(Run.objects.order_by("pk").values()),
        list(Handoff.objects.order_by("pk").values()),
    )


def _try(client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)


def _logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def _lockouts():
    return AuditEntry.objects.filter(action="login.locked_out")


# --- anonymous traffic -----------------------------------------------------------


@pytest.mark.parametrize("url_name", sorted(ACTION_POLICIES))
def test_an_anonymous_post_to_an_action_writes_nothing(client, target, url_name):  # noqa: F811
    url, data = target(url_name)
    before = _state()

    responses = [client.post(url, {**data, "key": uuid.uuid4().hex}) for _ in range(3)]

    assert [response.status_code for response in responses] == [403, 403, 403]
    assert b"Log in first" in responses[0].content
    assert _state() == before


def test_every_declared_action_is_covered_by_the_anonymous_check():
    assert set(ACTION_POLICIES) == {
        "sidewisp:wait-decide",
        "sidewisp:wait-reassign",
        "sidewisp:wait-cancel",
        "sidewisp:task-reopen",
        "sidewisp:task-verify",
        "sidewisp:task-accept",
        "sidewisp:task-resolve",
        "sidewisp:run-stop",
        "sidewisp:run-resume",
        "sidewisp:run-retry",
        "sidewisp:run-create",
        "sidewisp:run-declare",
        "sidewisp:waits-batch-decide",
    }


# --- throttling ------------------------------------------------------------------


def test_a_login_before_the_limit_works(client, person):
    person("vic", "viewer", password=PASSWORD)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _try(client, "vic", "wrong").status_code == 200

    response = _try(client, "vic", PASSWORD)

    assert response.status_code == 302
    assert _logged_in(client)
    assert not _lockouts().exists()


def test_the_sixth_attempt_from_one_address_is_refused_even_with_the_right_password(client, person):
    person("vic", "viewer", password=PASSWORD)
    failures = [_try(client, "vic", "wrong", address="10.0.1.1") for _ in range(5)]

    sixth = _try(client, "vic", PASSWORD, address="10.0.1.1")

    assert [r.status_code for r in failures] == [200, 200, 200, 200, 429]
    assert sixth.status_code == 429
    assert not _logged_in(client)
    page = sixth.content.decode()
    assert "Logging in is paused" in page
    assert "5 failed log-ins for this account from this address (or 20 from this address" in page
    assert "Try again after" in page


def test_bad_passwords_from_one_address_do_not_lock_the_owner_out_of_another(client, person):
    # The attack of issue 19: an attacker who knows vic's name types wrong passwords until vic is locked out.
    person("vic", "viewer", password=PASSWORD)
    attacker, vic_at_home = "203.0.113.66", "198.51.100.7"
    for _ in range(settings.AXES_FAILURE_LIMIT + 3):
        _try(client, "vic", "guess", address=attacker)

    from_home = _try(client, "vic", PASSWORD, address=vic_at_home)

    assert from_home.status_code == 302
    assert _logged_in(client)


def test_the_attacking_address_stays_throttled_even_with_the_right_password(client, person):
    person("vic", "viewer", password=PASSWORD)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        _try(client, "vic", "guess", address="203.0.113.66")

    guessed = _try(client, "vic", PASSWORD, address="203.0.113.66")

    assert guessed.status_code == 429
    assert not _logged_in(client)


def test_guessing_a_name_from_many_addresses_never_locks_the_name(client, person):
    person("vic", "viewer", password=PASSWORD)
    for i in range(3 * settings.AXES_FAILURE_LIMIT):
        _try(client, "vic", "guess", address=f"203.0.113.{i % 3 + 1}")

    response = _try(client, "vic", PASSWORD, address="198.51.100.7")

    assert response.status_code == 302


def test_the_lock_out_page_says_when_to_try_again(client, person):
    person("vic", "viewer", password=PASSWORD)
    for _ in range(5):
        _try(client, "vic", "wrong")

    page = _try(client, "vic", PASSWORD).content.decode()

    shown = datetime.fromisoformat(re.search(r'<time datetime="([^"]+)"', page).group(1))
    last_failure = AccessAttempt.objects.get(username="vic").attempt_time
    assert abs(shown - (last_failure + settings.AXES_COOLOFF_TIME)) < timedelta(seconds=1)


def test_a_lock_out_is_audited_once_without_password_or_address(client, person):
    person("vic", "viewer", password=PASSWORD)
    for _ in range(8):
        _try(client, "vic", "Secret-Guess-42", address="10.0.2.7")

    entry = _lockouts().get()

    assert (entry.actor, entry.actor_name, entry.outcome, entry.object_id) == (None, "system", "denied", "vic")
    stored = f"{entry.reason} {entry.detail} {entry.object_type}"
    assert "Secret-Guess-42" not in stored
    assert "10.0.2.7" not in stored


def test_an_address_is_limited_across_usernames(client, person):
    person("vic", "viewer", password=PASSWORD)
    names = [f"guess-{i}" for i in range(settings.SIDEWISP_LOGIN_ADDRESS_LIMIT)]
    for name in names[:-1]:
        _try(client, name, "wrong", address="10.0.3.3")
    assert _try(client, "vic", PASSWORD, address="10.0.3.3").status_code == 302  # one short of the limit
    client.logout()
    _try(client, names[-1], "wrong", address="10.0.3.3")

    same_address = _try(client, "vic", PASSWORD, address="10.0.3.3")
    other_address = _try(client, "vic", PASSWORD, address="10.0.3.4")

    assert same_address.status_code == 429
    assert other_address.status_code == 302
    assert _logged_in(client)


def test_a_name_that_is_no_account_is_not_kept_in_the_audit_log(client, db):
    for _ in range(5):
        _try(client, "correct horse battery staple", "wrong", address="10.0.4.4")

    entry = _lockouts().get()

    assert (entry.object_id, entry.detail["account"]) == ("", "unknown")
    assert "horse" not in f"{entry.reason} {entry.detail}"


def test_logging_in_works_again_once_the_cool_off_has_passed(client, person):
    person("vic", "viewer", password=PASSWORD)
    for _ in range(5):
        _try(client, "vic", "wrong")
    assert _try(client, "vic", PASSWORD).status_code == 429

    AccessAttempt.objects.update(attempt_time=AccessAttempt.objects.get().attempt_time - settings.AXES_COOLOFF_TIME)

    assert _try(client, "vic", PASSWORD).status_code == 302
    assert _logged_in(client)


def test_force_login_still_works_for_tests(client, person):
    client.force_login(person("vic", "viewer"))

    assert client.get(reverse("sidewisp:overview")).status_code == 200
