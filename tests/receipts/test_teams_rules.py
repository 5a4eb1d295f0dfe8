"""Per team (issue 22 §2): alert rules count their team's runs, wait owners and reassignment candidates are
the run's team's members, wait notifications reach only owners in the run's team, and a source token of one
team finds no run of another (404, not named)."""

from __future__ import annotations

import uuid

import pytest

from receipts import actions
from receipts.models import AlertRule, Delivery, NotificationChannel, Run
from receipts.notify import alerts
from receipts.org import teams
from tests.receipts.test_notifications import webhook


@pytest.fixture
def alpha(make_team):
    return make_team("alpha", graphs=["demo"], sources=["billing"])  # the graph scenario_handoff's runs are of


@pytest.fixture
def beta(make_team):
    return make_team("beta", graphs=["beta-graph"], sources=["shipping"])


@pytest.fixture
def channel(db):
    return NotificationChannel.objects.create(
        name="ops", kind=NotificationChannel.Kind.WEBHOOK, url="http://127.0.0.1:9/hook", secret="s3cret-for-tests"
    )


def _beta_run(record_handoff, kind: str) -> None:
    Run.objects.create(operation_id="op-beta", thread_id="op-beta", graph="beta-graph")
    record_handoff("h-beta", "op-beta", kind)


# --- alert rules --------------------------------------------------------------------------------------


def test_a_teams_verdict_rule_fires_on_its_teams_runs_and_not_on_anothers(channel, record_handoff, alpha, beta):
    AlertRule.objects.create(name="alpha false", kind="verdict", verdict="FALSE_COMPLETE", channel=channel, team=alpha)
    AlertRule.objects.create(name="anyone false", kind="verdict", verdict="FALSE_COMPLETE", channel=channel)

    _beta_run(record_handoff, "false_complete")

    assert [d.payload["rule"] for d in Delivery.objects.all()] == ["anyone false"]


def test_a_teams_window_rule_counts_only_its_teams_handoffs(channel, record_handoff, scenario_handoff, alpha, beta):
    rule = AlertRule.objects.create(name="alpha window", kind="window", threshold=0, channel=channel, team=alpha)
    _beta_run(record_handoff, "stale_control")

    assert alerts.evaluate_all() == 0
    scenario_handoff("stale_control", scenario="stale_control")  # alpha's (the demo graph)
    assert alerts.evaluate_all() == 1
    rule.refresh_from_db()
    delivery = Delivery.objects.get()
    assert delivery.payload["count"] == 1 and "of team alpha" in delivery.payload["condition"]
    assert delivery.payload["operation_id"] != "op-beta"


# --- wait owners ----------------------------------------------------------------------------------------


@pytest.fixture
def people(person, alpha, beta):
    found = {
        "operator": person("dispatcher", "operator"),
        "alpha_approver": person("ops-lead", "approver"),
        "beta_approver": person("other-lead", "approver"),
        "admin": person("boss", "admin"),
    }
    for name in ("operator", "alpha_approver"):
        teams.add_member(found[name], alpha)
    teams.add_member(found["beta_approver"], beta)
    return found


@pytest.fixture
def wait(scenario_handoff, people):
    return scenario_handoff("waiting", scenario="waiting_on_approval", owner="")


def test_reassignment_candidates_are_the_runs_teams_members_and_admins(people, wait):
    names = [u.username for u in actions.wait_owner_candidates(wait, by=people["operator"])]
    assert names == ["boss", "ops-lead"]


def test_a_wait_cannot_be_given_to_someone_of_another_team(people, wait):
    result = actions.reassign(
        user=people["operator"], handoff_id=wait.pk, owner="other-lead", deadline_minutes=30, key=uuid.uuid4().hex
    )
    assert result.outcome == actions.Outcome.REFUSED
    assert "other-lead is not a member of this run's team" in result.message
    wait.refresh_from_db()
    assert wait.wait_owner == ""


def test_an_owner_of_another_team_hears_nothing_of_a_wait(people, scenario_handoff):
    webhook(people["beta_approver"], url="http://127.0.0.1:9/hook", name="beta")
    webhook(people["alpha_approver"], url="http://127.0.0.1:9/hook2", name="alpha")

    scenario_handoff("waiting", scenario="waiting_on_approval", owner="other-lead")  # alpha's run, beta's person
    assert not Delivery.objects.exists()
    scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
    assert [d.recipient for d in Delivery.objects.all()] == ["ops-lead"]


# --- the receipts API --------------------------------------------------------------------------------------


def test_a_token_of_another_team_finds_no_run_and_learns_no_owner(client, contracts, alpha, beta):
    from receipts.workers import sources
    from tests.sidewisp.test_api import a_bundle, get_decision, post

    billing, shipping = sources.issue("billing")[1], sources.issue("shipping")[1]
    sent = a_bundle("waiting")
    assert post(client, billing, sent).status_code == 200

    taken, nobody = get_decision(client, shipping, sent["operation_id"]), get_decision(client, shipping, "op-nobody")
    assert (
        (taken.status_code, taken.json()["error"])
        == (nobody.status_code, nobody.json()["error"])
        == (
            404,
            {"field": "operation_id", "message": "names no run"},
        )
    )
    # issue 29 §3/§4: an id another source uses is, to this one, a new id (its own run), answered as one is.
    written = post(client, shipping, a_bundle(operation_id=sent["operation_id"], handoff_id=sent["handoff_id"]))
    fresh = post(client, shipping, a_bundle())
    assert (written.status_code, written.json()) == (fresh.status_code, fresh.json())
    assert written.status_code == 200 and "billing" not in written.content.decode()
