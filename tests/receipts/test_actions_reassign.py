"""Separation of duties on waits: a wait goes only to someone who may decide it, never to the reassigner
themself unless they hold decide-any; the reassignment and the later decision are both audited with who."""

from __future__ import annotations

import re
import uuid

import pytest
from django.urls import reverse

from receipts import actions
from receipts.models import AuditEntry


@pytest.fixture
def people(person):
    return {
        "owner": person("ops-lead", "approver"),
        "dual": person("oncall", "operator", "approver"),  # operator + approver, no decide-any
        "other_approver": person("approver-2", "approver"),
        "viewer": person("watcher", "viewer"),
        "operator": person("dispatcher", "operator"),
        "admin": person("boss", "admin"),
        "gone": person("former", "approver", is_active=False),
    }


@pytest.fixture
def wait(scenario_handoff):
    return scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")


@pytest.fixture
def enqueued(monkeypatch):
    from agents import tasks

    ids: list[int] = []
    monkeypatch.setattr(tasks.resume_run, "delay", ids.append)
    return ids


def reassign(user, wait, owner: str):
    return actions.reassign(user=user, handoff_id=wait.pk, owner=owner, deadline_minutes=30, key=uuid.uuid4().hex)


def test_an_operator_approver_cannot_give_another_owners_wait_to_themself(people, wait):
    result = reassign(people["dual"], wait, "oncall")

    wait.refresh_from_db()
    entry = AuditEntry.objects.get()
    assert result.outcome == "refused"
    assert "yourself" in result.message
    assert wait.wait_owner == "ops-lead"
    assert (entry.actor_name, entry.action, entry.outcome, entry.detail["owner"]) == (
        "oncall",
        "wait.reassign",
        "refused",
        "oncall",
    )


def test_a_decide_any_holder_may_take_a_wait_themself(people, wait):
    result = reassign(people["admin"], wait, "boss")

    wait.refresh_from_db()
    assert result.outcome == "done"
    assert wait.wait_owner == "boss"


@pytest.mark.parametrize("nobody", ["watcher", "dispatcher", "former"])
def test_a_wait_cannot_be_given_to_someone_who_may_not_decide_it(people, wait, nobody):
    result = reassign(people["dual"], wait, nobody)

    wait.refresh_from_db()
    assert result.outcome == "refused"
    assert wait.wait_owner == "ops-lead"
    assert AuditEntry.objects.get().outcome == "refused"


def test_the_reassign_page_offers_only_people_who_may_decide_the_wait(client, people, wait):
    client.force_login(people["dual"])

    page = client.get(reverse("sidewisp:confirm", args=["reassign", wait.pk])).content.decode()

    offered = re.findall(r'<option value="([^"]+)"', page)
    assert offered == ["approver-2", "boss", "ops-lead"]


def test_a_decide_any_holder_is_offered_themself(client, people, wait):
    client.force_login(people["admin"])

    page = client.get(reverse("sidewisp:confirm", args=["reassign", wait.pk])).content.decode()

    assert "boss" in re.findall(r'<option value="([^"]+)"', page)


def test_the_candidates_are_exactly_those_the_rule_allows(people, wait):
    allowed = {u.username for u in people.values() if actions.may_decide_as_owner(u, wait, by=people["dual"])}

    candidates = {u.username for u in actions.wait_owner_candidates(wait, by=people["dual"])}

    assert candidates == allowed == {"ops-lead", "approver-2", "boss"}


def test_a_forged_post_giving_the_wait_to_oneself_is_refused_and_audited(client, people, wait):
    client.force_login(people["dual"])

    response = client.post(
        reverse("sidewisp:wait-reassign", args=[wait.pk]),
        {"owner": "oncall", "deadline_minutes": "30", "key": uuid.uuid4().hex, "reason": "I'll take it"},
    )

    assert response.status_code == 409
    assert AuditEntry.objects.get().outcome == "refused"


def test_the_reassignment_and_the_later_decision_are_both_audited_with_who(client, people, wait, enqueued):
    reassigned = reassign(people["dual"], wait, "approver-2").handoff
    client.force_login(people["other_approver"])

    response = client.post(
        reverse("sidewisp:wait-decide", args=[wait.pk]),
        {"decision": "approve", "token": reassigned.wait_part["resume_token_id"], "key": uuid.uuid4().hex},
        follow=True,  # the decision redirects (303) to its result page
    )

    steps = [
        (e.actor_name, e.action, e.outcome, e.detail.get("owner"))
        for e in AuditEntry.objects.order_by("pk")
        if e.action.startswith("wait.")
    ]
    assert response.status_code == 200
    assert steps == [
        ("oncall", "wait.reassign", "done", "approver-2"),
        ("approver-2", "wait.approve", "done", None),
    ]
