"""The team switcher in a real browser (issue 22 §2): shown to a user in two teams, it narrows the page, a refused
team is a page that says why, and none of it has an axe-core WCAG 2 A/AA violation."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import PEOPLE, axe_violations
from tests.e2e.test_live_pages import expect, in_db_thread

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


def _two_teams() -> None:
    from django.contrib.auth import get_user_model

    from receipts.models import Team
    from receipts.org import teams

    viewer = get_user_model().objects.get(username=PEOPLE["viewer"])
    default, _ = Team.objects.get_or_create(slug="default", defaults={"name": "Default", "owns_unclaimed": True})
    teams.add_member(viewer, default)
    teams.add_member(viewer, Team.objects.create(slug="alpha", name="Alpha"))


@pytest.mark.parametrize("path", ["/", "/waits/", "/map/"])
def test_the_switcher_narrows_the_page_and_has_no_wcag_violation(open_as, people_server, path):
    in_db_thread(_two_teams)
    page = open_as("viewer")

    page.goto(people_server.url + path)
    switch = page.locator("nav.team-switch")
    expect(switch).to_be_visible()
    found = [f"{path}: {v['id']} at {v['targets']}" for v in axe_violations(page)]
    switch.locator('a[data-team="alpha"]').click()
    expect(page.locator('nav.team-switch a[data-team="alpha"][aria-current="page"]')).to_be_visible()
    assert "team=alpha" in page.url
    found += [f"{path}?team=alpha: {v['id']} at {v['targets']}" for v in axe_violations(page)]
    assert found == []


def test_a_team_that_is_not_the_users_is_a_page_that_says_so(open_as, people_server):
    page = open_as("viewer")

    response = page.goto(f"{people_server.url}/?team=nosuch")

    assert response.status == 400
    expect(page.locator("#bad-request-why")).to_contain_text("that team is not one of yours")
    assert axe_violations(page) == []
