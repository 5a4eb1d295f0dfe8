"""Pages spend little CPU a request (issue 32 §4): a list's row renders no template per badge or time, and the runs
list's filter fields are rendered once per distinct filters (each request still shows its own values and errors)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.sidewisp.test_pages import bulk_handoffs

pytestmark = pytest.mark.django_db

RUNS = reverse("sidewisp:runs")


def _rendered(client, params: dict) -> tuple[list[str], str]:
    """The templates the second of two identical requests rendered, and its body."""
    client.get(RUNS, params)
    response = client.get(RUNS, params)
    return [t.name for t in response.templates], response.content.decode()


def test_a_runs_list_row_renders_at_most_two_templates(viewer_client):
    bulk_handoffs(300)  # 30 runs: a full page of 25, and 11 of them match "p-2"
    full, full_body = _rendered(viewer_client, {})
    few, few_body = _rendered(viewer_client, {"q": "p-2"})
    rows = full_body.count('id="run-row-'), few_body.count('id="run-row-')
    assert rows == (25, 11)
    # The row and its dry-run mark; its health, verdict and time badges are built by simple tags.
    assert (len(full) - len(few)) / (rows[0] - rows[1]) <= 2


def test_the_runs_filters_render_once_and_show_each_requests_own_values_and_errors(viewer_client):
    bulk_handoffs(10)
    templates, body = _rendered(viewer_client, {"agent": "alice"})
    assert not [name for name in templates if name.startswith("django/forms/")]
    assert 'value="alice"' in body
    other = viewer_client.get(RUNS, {"agent": "bob"}).content.decode()
    assert 'value="bob"' in other and 'value="alice"' not in other
    assert "Enter a valid date/time" in viewer_client.get(RUNS, {"since": "yesterday"}).content.decode()
    assert "Enter a valid date/time" not in viewer_client.get(RUNS, {"since": "2026-01-02T03:04"}).content.decode()
