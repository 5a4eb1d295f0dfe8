"""The role-by-action matrix across two teams (issue 22 §2): inside their team each role may do what its policy
allows; on another team's object every cell is refused as if it did not exist (404), audited, nothing changed."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from receipts.models import AuditEntry, Handoff, Run, Team
from receipts.org import teams
from tests.sidewisp import test_actions_matrix as matrix
from tests.sidewisp.test_actions_matrix import ALLOWED, ROLES, SUCCESS_STATUS, key

target = matrix.target  # the single-team matrix's objects, one per action (a fixture)

SIGNED_IN = [role for role in ROLES if role != "anonymous"]


@pytest.fixture
def alpha(make_team):
    """The team that owns the demo graph, whose runs every `target` makes."""
    return make_team("alpha", graphs=["demo"])


@pytest.fixture
def beta(make_team):
    return make_team("beta", graphs=["beta-graph"])


@pytest.fixture
def people(person):
    return {
        "viewer": person("watcher", "viewer"),
        "operator": person("oncall", "operator"),
        "owner": person("ops-lead", "approver"),
        "other_approver": person("approver-2", "approver"),
        "admin": person("boss", "admin"),
    }


def _in_team(people: dict, team: Team) -> None:
    for role, user in people.items():
        if role != "admin":  # an admin of Sidewisp sees every team without being in one
            teams.add_member(user, team)


def _state() -> list:
    """Everything an action could change, to compare before and after a refused one."""
    runs = list(Run.objects.order_by("pk").values_list("pk", "status", "auto_continue", "seq"))
    handoffs = list(Handoff.objects.order_by("pk").values_list("pk", "verdict", "wait_open", "wait_owner"))
    return [runs, handoffs]


@pytest.mark.parametrize("role", SIGNED_IN)
@pytest.mark.parametrize("url_name", sorted(ALLOWED))
def test_inside_their_team_each_role_may_do_what_its_policy_allows(client, people, target, alpha, beta, role, url_name):
    _in_team(people, alpha)
    url, data = target(url_name)
    client.force_login(people[role])

    response = client.post(url, {**data, "key": key()})

    entry = AuditEntry.objects.order_by("-pk").first()
    if role in ALLOWED[url_name]:
        assert response.status_code == SUCCESS_STATUS.get(url_name, 200), response.content[:500]
        assert (entry.outcome, entry.actor_name) == ("done", people[role].username)
    else:
        assert response.status_code == 403
        assert (entry.outcome, entry.actor_name) == ("denied", people[role].username)


# Object-less URLs: starting a run (graph names, below) and a batch of waits (its waits are named in the
# signed form; each is checked on its own, below).
NO_OBJECT_IN_URL = {"sidewisp:run-create", "sidewisp:waits-batch-decide"}


@pytest.mark.parametrize("role", SIGNED_IN)
@pytest.mark.parametrize("url_name", sorted(set(ALLOWED) - NO_OBJECT_IN_URL))
def test_on_another_teams_object_every_cell_is_not_found(client, people, target, alpha, beta, role, url_name):
    url, data = target(url_name)  # alpha's object
    if role != "admin":
        _in_team(people, beta)
    client.force_login(people[role])
    before = _state()

    response = client.post(url, {**data, "key": key()})

    entry = AuditEntry.objects.order_by("-pk").first()
    if role == "admin":  # the admin role sees every team: its cells are the single-team matrix's
        if url_name == "sidewisp:wait-reassign":  # but the new owner must be of the run's team, and is not
            assert response.status_code == 409
            assert "ops-lead is not a member of this run&#x27;s team" in response.content.decode()
            return
        assert response.status_code == SUCCESS_STATUS.get(url_name, 200)
        return
    assert response.status_code == 404, response.content[:300]
    assert (entry.outcome, entry.actor_name, entry.reason) == ("denied", people[role].username, "no such object")
    assert entry.run is None and entry.handoff is None
    assert _state() == before
    # The same words as for an id that does not exist at all: no existence oracle.
    missing = client.post(url.replace(f"/{url.split('/')[-3]}/", "/987654321/"), {**data, "key": key()})
    assert missing.status_code == 404
    kind = "run" if "/runs/" in url else "handoff"
    assert f"There is no {kind}" in response.content.decode()


@pytest.mark.parametrize("role", ["owner", "operator", "other_approver"])
def test_another_teams_wait_in_a_batch_is_left_out_as_no_such_wait_and_nothing_is_decided(
    client, people, target, alpha, beta, role
):
    url, data = target("sidewisp:waits-batch-decide")  # a batch naming alpha's wait
    _in_team(people, beta)
    client.force_login(people[role])
    before = _state()

    response = client.post(url, {**data, "key": key()})

    assert _state() == before
    page = response.content.decode()
    assert "0 waits approved" in page
    # The words for an id that does not exist at all: no existence oracle.
    assert re.search(r"There is no handoff \d+\.", page)
    entry = AuditEntry.objects.order_by("-pk").first()
    assert (entry.outcome, entry.actor_name, entry.reason) == ("denied", people[role].username, "no such object")
    assert entry.run is None and entry.handoff is None


@pytest.mark.parametrize("role", ["operator", "viewer"])
def test_starting_a_run_of_another_teams_graph_is_refused_like_an_unknown_graph(
    client, people, target, alpha, beta, role
):
    url, data = target("sidewisp:run-create")  # the demo graph: alpha's
    _in_team(people, beta)
    client.force_login(people[role])

    response = client.post(url, {**data, "key": key()})
    unknown = client.post(url, {**data, "graph": "nograph", "key": key()})

    # issue 29 §3: the form offers only the user's teams' graphs and answers another team's as an unknown name
    # (the same status, the same page but for the name and the form's fresh tokens).
    assert response.status_code == unknown.status_code == (400 if role == "operator" else 403)
    assert _answer(response, "demo") == _answer(unknown, "nograph")
    assert "There is no registered graph" not in response.content.decode()  # the action's 409 is not reached
    assert not Run.objects.exists()


def _answer(response, name: str) -> str:
    """The page without the name it answers about and the tokens every page has afresh."""
    body = response.content.decode().replace(name, "NAME")
    return re.sub(r'(name="(csrfmiddlewaretoken|key)" value=|csrf-token" content=|token": )"[^"]*"', r"\1", body)


@pytest.mark.parametrize(
    "what",
    ["approve", "reject", "reassign", "cancel", "reopen", "verify", "accept", "resolve", "stop", "resume", "retry"],
)
def test_a_confirmation_page_of_another_teams_object_is_not_found(client, people, scenario_handoff, alpha, beta, what):
    _in_team(people, beta)
    client.force_login(people["operator"])
    handoff = scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead")
    pk = handoff.run_id if what in ("stop", "resume", "retry") else handoff.pk

    assert client.get(reverse("sidewisp:confirm", args=[what, pk])).status_code == 404


def test_another_teams_run_page_and_history_are_not_found(client, people, scenario_handoff, alpha, beta):
    handoff = scenario_handoff("false_complete", scenario="false_complete")
    _in_team(people, beta)
    client.force_login(people["viewer"])

    assert client.get(reverse("sidewisp:run-detail", args=[handoff.run_id])).status_code == 404
    assert client.get(reverse("sidewisp:run-history", args=[handoff.run_id])).status_code == 404
    teams.add_member(people["viewer"], alpha)
    assert client.get(reverse("sidewisp:run-detail", args=[handoff.run_id])).status_code == 200
