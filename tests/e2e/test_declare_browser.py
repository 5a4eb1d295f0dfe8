"""Declare what you saw, in a real browser: the admin's draft is accessible, and its button declares it."""

from __future__ import annotations

import pytest

from tests.conftest import handoff_parts
from tests.e2e.conftest import axe_violations
from tests.e2e.test_live_pages import expect, in_db_thread, record_parts

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


def _rejected_run() -> int:
    parts = handoff_parts("healthy", sender="alice", receiver="bob")
    parts[0] = ("created", {**parts[0][1], "route_version": "teams/9", "route_version_source": "middleware"})
    record_parts("h-declare", "op-declare", parts)

    def _run_pk() -> int:
        from receipts.models import Run

        return Run.objects.get(operation_id="op-declare").pk

    return in_db_thread(_run_pk)


def _verdict() -> str:
    from receipts.models import Handoff

    return in_db_thread(lambda: Handoff.objects.get(handoff_id="h-declare").verdict)


def test_an_admin_declares_what_a_run_showed_from_its_page(open_as, people_server):
    run_pk = _rejected_run()
    assert _verdict() == "ROUTE_REJECTED"
    page = open_as("admin")
    page.goto(f"{people_server.url}/runs/{run_pk}/")
    expect(page.locator("[data-declare] h2")).to_have_text("Declare what you saw")
    assert axe_violations(page) == []

    page.fill("[data-draft='teams/9'] input[name=reason]", "alice hands to bob")
    page.click("button[data-action=declare]")

    expect(page.locator("#result-title")).to_have_text("Done")
    assert _verdict() == "HEALTHY"
