"""Teams in the Django admin (issue 22 §2): an admin edits a team, its members, graphs and sources; audited."""

from __future__ import annotations

from django.urls import reverse

from receipts.models import AuditEntry, Membership, Team
from receipts.org import teams


def _formset(prefix: str, rows: list[dict]) -> dict:
    data = {f"{prefix}-TOTAL_FORMS": str(len(rows)), f"{prefix}-INITIAL_FORMS": "0"}
    data |= {f"{prefix}-MIN_NUM_FORMS": "0", f"{prefix}-MAX_NUM_FORMS": "1000"}
    for i, row in enumerate(rows):
        data |= {f"{prefix}-{i}-{name}": value for name, value in row.items()}
    return data


def test_an_admin_adds_a_team_with_its_members_graphs_and_sources(client, person):
    client.force_login(person("boss", "admin", is_staff=True))
    ann = person("ann", "viewer")

    data = {"slug": "gamma", "name": "Gamma"}
    data |= _formset("memberships", [{"user": ann.pk, "origin": "local"}])
    data |= _formset("graphs", [{"graph": "gamma-graph"}])
    data |= _formset("sources", [{"source_name": "gamma-remote"}])
    response = client.post(reverse("admin:receipts_team_add"), data)

    assert response.status_code == 302, response.content.decode()[:2000]
    gamma = Team.objects.get(slug="gamma")
    assert list(gamma.graphs.values_list("graph", flat=True)) == ["gamma-graph"]
    assert list(gamma.sources.values_list("source_name", flat=True)) == ["gamma-remote"]
    assert Membership.objects.get(team=gamma).user == ann
    assert list(teams.teams_of(ann)) == [gamma]
    entry = AuditEntry.objects.get(action="team.add")
    assert (entry.object_id, entry.actor_name) == ("gamma", "boss")
    assert entry.detail["changed"] == ["membership", "teamgraph", "teamsource"]


def test_a_graph_has_one_owner(client, person):
    client.force_login(person("boss", "admin", is_staff=True))
    Team.objects.create(slug="alpha", name="Alpha").graphs.create(graph="shared")

    data = {"slug": "beta", "name": "Beta"} | _formset("memberships", []) | _formset("sources", [])
    response = client.post(reverse("admin:receipts_team_add"), data | _formset("graphs", [{"graph": "shared"}]))

    assert response.status_code == 200 and not Team.objects.filter(slug="beta").exists()
    assert "already exists" in response.content.decode()


def test_an_operator_may_not_edit_teams(client, person):
    client.force_login(person("oncall", "operator", is_staff=True))

    assert client.get(reverse("admin:receipts_team_changelist")).status_code == 403
