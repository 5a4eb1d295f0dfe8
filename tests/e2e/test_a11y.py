"""Every page, as each role that can see it, has no axe-core WCAG 2 A/AA violation (real Chromium).

axe-core is vendored (tests/e2e/vendor/axe.min.js) and injected into a context
that bypasses the CSP for this purpose only; the pages themselves keep it.
"""

from __future__ import annotations

import pytest

from tests.e2e.conftest import PHONE, axe_violations
from tests.e2e.test_live_pages import expect

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

VIEWER_PAGES = [
    "/runs/?page=2&since=yesterday",
    "/",
    "/runs/",
    "/runs/?verdict=FALSE_COMPLETE&q=op-phone",
    "/runs/{wait_run}/",
    "/runs/{stale_run}/",
    "/runs/{context_run}/",
    "/runs/{wait_run}/history/",  # the run's history (issue 21 §1)
    "/map/",  # the team map (issue 21 §2); every run page above shows its run's map too
    "/map/?window=7d&graph=nosuch",  # with a refused choice: the form's error beside the map
    "/waits/",
    "/waits/?mine=1",
    "/false-completions/",
    "/system/",
]
# Beyond the viewer's pages, what each role may open.
ROLE_PAGES = {
    "viewer": VIEWER_PAGES,
    "approver": [
        *VIEWER_PAGES,
        "/confirm/approve/{wait}/",
        "/confirm/reject/{wait}/",
        "/confirm/edit/{wait}/",
    ],
    "operator": [
        *VIEWER_PAGES,
        "/audit/",
        "/runs/start/",
        "/confirm/reassign/{wait}/",
        "/confirm/cancel/{wait}/",
        "/confirm/reopen/{false}/",
        "/confirm/stop/{stale_run}/",
        "/confirm/resume/{stale_run}/",
    ],
    # Refused: the 403 page, and an action result saying the attempt was not allowed.
    "outsider": ["/", "/confirm/approve/{wait}/"],
    "admin": ["/", "/audit/", "/audit/?outcome=done", "/runs/start/", "/confirm/approve/{wait}/"],
}


def _check(page, url: str) -> list[str]:
    response = page.goto(url)
    assert response.status < 500, url
    expect(page.locator("h1").first).to_be_visible()
    return [f"{url}: {v['id']} ({v['help']}) at {v['targets']}" for v in axe_violations(page)]


@pytest.mark.parametrize("role", list(ROLE_PAGES))
def test_every_page_a_role_can_open_has_no_wcag_violation(open_as, people_server, role):
    page = open_as(role)
    seeded = vars(people_server.seeded)
    found = []
    for path in ROLE_PAGES[role]:
        found += _check(page, people_server.url + path.format(**seeded))
    assert found == []


def test_the_pages_without_a_login_have_no_wcag_violation(open_as, people_server):
    page = open_as(None)
    found = _check(page, f"{people_server.url}/login/")
    page.fill("#id_username", "nobody")
    page.fill("#id_password", "wrong-password")
    page.click("button[type=submit]")
    expect(page.locator(".error")).to_be_visible()
    found += [f"failed login: {v['id']} at {v['targets']}" for v in axe_violations(page)]
    assert found == []


def test_a_confirmation_page_with_form_errors_has_no_wcag_violation(open_as, people_server):
    page = open_as("approver")
    found = _check(page, f"{people_server.url}/confirm/reject/{people_server.seeded.wait}/")
    page.locator("button[data-confirm=reject]").click()  # a rejection without a reason is refused
    expect(page.locator("p.error").first).to_be_visible()
    found += [f"reject without a reason: {v['id']} at {v['targets']}" for v in axe_violations(page)]
    assert found == []


def test_the_waits_inbox_on_a_phone_has_no_wcag_violation(open_as, people_server):
    page = open_as("approver", viewport=PHONE)
    assert _check(page, f"{people_server.url}/waits/") == []
