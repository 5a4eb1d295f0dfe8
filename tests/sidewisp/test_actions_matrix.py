"""Every mutating action by every role, CSRF on every mutating URL, and no POST URL without a policy."""

from __future__ import annotations

import re
import uuid

import pytest
from django.test import Client
from django.urls import URLResolver, get_resolver, reverse

from receipts import actions
from receipts.models import AuditEntry, Decision, Run
from sidewisp.views import ACTION_POLICIES, NOT_ACTIONS
from tests.conftest import record_wait_for

ROLES = ("anonymous", "viewer", "operator", "owner", "other_approver", "admin")

# Who may do what (spec §5 and the role groups): anything not listed is denied.
ALLOWED: dict[str, set[str]] = {
    "sidewisp:wait-decide": {"owner", "admin"},
    "sidewisp:waits-batch-decide": {"owner", "admin"},  # issue 30 §7: each wait decided on its own
    "sidewisp:wait-reassign": {"operator", "admin"},
    "sidewisp:wait-cancel": {"operator", "admin"},
    "sidewisp:task-reopen": {"operator", "admin"},
    "sidewisp:task-verify": {"operator", "admin"},
    "sidewisp:task-accept": {"operator", "admin"},
    "sidewisp:task-resolve": {"operator", "admin"},
    "sidewisp:run-stop": {"operator", "admin"},
    "sidewisp:run-resume": {"operator", "admin"},
    "sidewisp:run-retry": {"operator", "admin"},
    "sidewisp:run-create": {"operator", "admin"},
    "sidewisp:run-declare": {"admin"},  # issue 28 §8: declaring a run's rejected routes changes the contracts
}
# What an allowed action answers: its result page, or for a start the new run's page.
SUCCESS_STATUS = {"sidewisp:run-create": 302, "sidewisp:wait-decide": 303}  # redirected to their result page


def key() -> str:
    return uuid.uuid4().hex


@pytest.fixture
def people(person):
    return {
        "viewer": person("watcher", "viewer"),
        "operator": person("oncall", "operator"),
        "owner": person("ops-lead", "approver"),
        "other_approver": person("approver-2", "approver"),
        "admin": person("boss", "admin"),
    }


@pytest.fixture
def target(scenario_handoff):
    """For each action: (URL, POST data) on an object whose state permits the action."""

    def _target(url_name: str) -> tuple[str, dict]:
        if url_name == "sidewisp:run-create":
            return reverse(url_name), {"graph": "demo", "graph_input": '{"messages": []}'}
        if url_name == "sidewisp:wait-decide":
            h = scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
            data = {"decision": "approve", "token": h.wait_part["resume_token_id"]}
            return reverse(url_name, args=[h.pk]), data
        if url_name == "sidewisp:waits-batch-decide":
            from sidewisp.pages import batch

            h = scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
            return reverse(url_name), {"batch": batch.Batch("approve", "t", included=[batch.Item(h)]).signed}
        if url_name in ("sidewisp:wait-reassign", "sidewisp:wait-cancel"):
            h = scenario_handoff("waiting", scenario="waiting_on_approval", owner="")
            assert h.verdict == "UNCERTAIN"
            return reverse(url_name, args=[h.pk]), {"owner": "ops-lead", "deadline_minutes": "60", "reason": "on call"}
        if url_name in (
            "sidewisp:task-reopen",
            "sidewisp:task-verify",
            "sidewisp:task-accept",
            "sidewisp:task-resolve",
        ):
            h = scenario_handoff("false_complete", scenario="false_complete")
            return reverse(url_name, args=[h.pk]), {"reason": "the customer says no order arrived"}
        if url_name == "sidewisp:run-declare":
            h = scenario_handoff("healthy", scenario="route_rejected", sender="triage", receiver="coder")
            assert h.verdict == "ROUTE_REJECTED"  # routes/1 does not declare triage → coder
            (draft,) = actions.run_drafts(h.run)
            return reverse(url_name, args=[h.run_id]), {"version": draft.version, "digest": draft.digest}
        h = scenario_handoff("stale_control", scenario="stale_control")
        if url_name == "sidewisp:run-resume":
            Run.objects.filter(pk=h.run_id).update(auto_continue=False)
        if url_name == "sidewisp:run-retry":
            Run.objects.filter(pk=h.run_id).update(status=Run.Status.PARKED)
        return reverse(url_name, args=[h.run_id]), {"reason": "evidence compared"}

    return _target


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("url_name", sorted(ALLOWED))
def test_each_role_may_do_exactly_what_its_policy_allows(client, people, target, role, url_name):
    url, data = target(url_name)
    if role != "anonymous":
        client.force_login(people[role])

    response = client.post(url, {**data, "key": key()})

    entry = AuditEntry.objects.order_by("-pk").first()
    if role == "anonymous":
        # Refused before any check: an anonymous POST writes nothing, not even a denial (test_login).
        assert (response.status_code, entry) == (403, None)
    elif role in ALLOWED[url_name]:
        assert response.status_code == SUCCESS_STATUS.get(url_name, 200), response.content[:500]
        assert (entry.outcome, entry.actor_name) == ("done", people[role].username)
    else:
        assert response.status_code == 403
        assert (entry.outcome, entry.actor_name) == ("denied", people[role].username)


# Actions whose repeat with the same idempotency key is a no-op that changes nothing (run-create: test_start_run).
REPLAYABLE = sorted(set(ALLOWED) - {"sidewisp:run-create", "sidewisp:wait-decide"})


@pytest.mark.parametrize("url_name", REPLAYABLE)
def test_a_replay_with_the_same_key_changes_nothing(client, people, target, url_name):
    url, data = target(url_name)
    client.force_login(people["admin"])
    same = key()

    first = client.post(url, {**data, "key": same})
    again = client.post(url, {**data, "key": same})

    assert (first.status_code, again.status_code) == (200, 200)
    outcomes = list(AuditEntry.objects.order_by("pk").values_list("outcome", flat=True))
    assert outcomes == ["done", "noop"]
    assert "Nothing changed" in again.content.decode()


def test_the_matrix_covers_every_declared_action():
    assert set(ALLOWED) == set(ACTION_POLICIES)


def _routes(patterns, prefix: str = "", namespace: str = ""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            yield from _routes(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif pattern.name:
            yield f"{namespace}{pattern.name}", prefix + str(pattern.pattern)


def _concrete(route: str) -> str:
    return "/" + re.sub(r"<(?:(\w+):)?\w+>", lambda m: "999999" if m.group(1) == "int" else "approve", route)


def test_every_url_that_accepts_post_has_a_declared_policy(client, people):
    client.force_login(people["admin"])
    undeclared = []
    for name, route in _routes(get_resolver().url_patterns):
        if name.startswith("admin:"):
            continue  # the Django admin: staff and model permissions (NOT_ACTIONS)
        if client.post(_concrete(route)).status_code == 405:
            continue
        if name not in ACTION_POLICIES and name not in NOT_ACTIONS:
            undeclared.append(name)
        if name == "logout":
            client.force_login(people["admin"])

    assert undeclared == []


def test_every_declared_action_refuses_get(client, people, target):
    client.force_login(people["admin"])
    for url_name in ACTION_POLICIES:
        url, _ = target(url_name)
        assert client.get(url).status_code == 405, url_name


@pytest.mark.parametrize("url_name", sorted(ALLOWED))
def test_a_post_without_a_csrf_token_is_refused(people, target, url_name):
    url, data = target(url_name)
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(people["admin"])

    response = csrf_client.post(url, {**data, "key": key()})

    assert response.status_code == 403
    assert not AuditEntry.objects.filter(outcome="done").exists()
    assert not Decision.objects.exists()


def test_deciding_another_owners_wait_by_guessing_its_id_is_denied_and_audited(client, people, scenario_handoff):
    theirs = scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
    client.force_login(people["other_approver"])

    response = client.post(
        reverse("sidewisp:wait-decide", args=[theirs.pk]),
        {"decision": "approve", "token": theirs.wait_part["resume_token_id"], "key": key()},
    )

    entry = AuditEntry.objects.get()
    assert response.status_code == 403
    assert (entry.actor_name, entry.action, entry.outcome, entry.handoff_id) == (
        "approver-2",
        "wait.approve",
        "denied",
        theirs.pk,
    )
    assert not Decision.objects.exists()


def test_an_id_that_does_not_exist_is_not_found_and_audited(client, people):
    client.force_login(people["owner"])

    response = client.post(reverse("sidewisp:wait-decide", args=[424242]), {"decision": "approve", "key": key()})

    assert response.status_code == 404
    assert AuditEntry.objects.get().object_id == "424242"


def test_the_confirmation_page_names_the_operation_and_is_denied_to_a_viewer(client, people, scenario_handoff):
    wait = scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
    url = reverse("sidewisp:confirm", args=["approve", wait.pk])

    client.force_login(people["viewer"])
    denied = client.get(url)
    client.force_login(people["owner"])
    shown = client.get(url)

    assert denied.status_code == 403
    # Opening a page is not an attempt: only a refused POST is audited.
    assert not AuditEntry.objects.exists()
    assert shown.status_code == 200
    assert wait.run.operation_id in shown.content.decode()
    assert 'name="key"' in shown.content.decode()


def test_a_user_in_no_group_can_do_nothing(client, django_user_model, scenario_handoff):
    nobody = django_user_model.objects.create_user(username="nobody", password="pw-for-tests-only-1")
    wait = scenario_handoff("waiting", scenario="waiting_on_approval", owner="nobody")
    client.force_login(nobody)

    response = client.post(
        reverse("sidewisp:wait-decide", args=[wait.pk]),
        {"decision": "approve", "token": wait.wait_part["resume_token_id"], "key": key()},
    )

    assert response.status_code == 403
    assert not Decision.objects.exists()


def test_a_rejection_without_a_reason_is_a_clear_error_not_a_decision(client, people, scenario_handoff):
    wait = scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
    client.force_login(people["owner"])

    response = client.post(
        reverse("sidewisp:wait-decide", args=[wait.pk]),
        {"decision": "reject", "token": wait.wait_part["resume_token_id"], "key": key(), "reason": " "},
    )

    assert response.status_code == 400
    assert "A reason is required to reject." in response.content.decode()
    assert not Decision.objects.exists()


def test_reassigning_an_uncertain_wait_makes_it_a_valid_wait_of_its_new_owner(client, people, scenario_handoff):
    wait = scenario_handoff("waiting", scenario="waiting_on_approval", owner="")
    client.force_login(people["operator"])

    client.post(
        reverse("sidewisp:wait-reassign", args=[wait.pk]),
        {"owner": "ops-lead", "deadline_minutes": "30", "key": key(), "reason": ""},
    )

    wait.refresh_from_db()
    assert (wait.verdict, wait.wait_owner) == ("WAITING_ON_APPROVAL", "ops-lead")


def test_cancelling_a_wait_closes_it_and_fails_its_run(client, people, scenario_handoff):
    wait = scenario_handoff("waiting", scenario="waiting_on_approval", owner="")
    client.force_login(people["operator"])

    client.post(reverse("sidewisp:wait-cancel", args=[wait.pk]), {"key": key(), "reason": "duplicate request"})

    wait.refresh_from_db()
    wait.run.refresh_from_db()
    assert wait.wait_open is False
    assert (wait.run.status, wait.run.error) == ("failed", "Cancelled")


def test_a_cancel_without_a_reason_changes_nothing(client, people, scenario_handoff):
    wait = scenario_handoff("waiting", scenario="waiting_on_approval", owner="")
    client.force_login(people["operator"])

    response = client.post(reverse("sidewisp:wait-cancel", args=[wait.pk]), {"key": key(), "reason": ""})

    wait.refresh_from_db()
    assert response.status_code == 400
    assert wait.wait_open is True


def test_reassigning_to_someone_who_does_not_exist_is_refused(client, people, scenario_handoff):
    wait = scenario_handoff("waiting", scenario="waiting_on_approval", owner="")
    client.force_login(people["operator"])

    response = client.post(
        reverse("sidewisp:wait-reassign", args=[wait.pk]),
        {"owner": "ghost", "deadline_minutes": "30", "key": key(), "reason": ""},
    )

    assert response.status_code == 409
    assert AuditEntry.objects.get().outcome == "refused"


def test_stopping_a_healthy_run_is_refused(client, people, scenario_handoff):
    healthy = scenario_handoff("healthy", scenario="healthy_purchase")
    client.force_login(people["operator"])

    response = client.post(
        reverse("sidewisp:run-stop", args=[healthy.run_id]), {"key": key(), "reason": "just in case"}
    )

    healthy.run.refresh_from_db()
    assert response.status_code == 409
    assert healthy.run.auto_continue is True


def test_the_run_page_shows_stale_control_evidence_side_by_side(client, people, scenario_handoff):
    stale = scenario_handoff("stale_control", scenario="stale_control")
    url = reverse("sidewisp:run-detail", args=[stale.run_id])
    client.force_login(people["viewer"])
    seen = client.get(url).content.decode()
    client.force_login(people["operator"])
    body = client.get(url).content.decode()

    assert "Declared vs what the state says" in seen
    assert reverse("sidewisp:confirm", args=["stop", stale.run_id]) not in seen
    assert reverse("sidewisp:confirm", args=["stop", stale.run_id]) in body


def test_an_existing_wait_owner_record_is_what_the_owner_rule_reads(client, people, scenario_handoff):
    wait = scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
    wait = record_wait_for(wait, owner="approver-2")  # reassigned: the old owner may no longer decide
    client.force_login(people["owner"])

    response = client.post(
        reverse("sidewisp:wait-decide", args=[wait.pk]),
        {"decision": "approve", "token": wait.wait_part["resume_token_id"], "key": key()},
    )

    assert response.status_code == 403
