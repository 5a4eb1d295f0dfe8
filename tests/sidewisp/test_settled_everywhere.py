"""Settled everywhere (issue 28 §7): an unsettled failing verdict reads as in progress on the overview's tiles and
counts, in the lists its tiles link to, in the run's history and in the wait boundary; a tile's link lists
exactly what the tile counted."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from receipts.ingest import intake, recording
from receipts.models import Handoff
from tests.conftest import handoff_parts

pytestmark = pytest.mark.django_db


def receive(part: str, value: object, handoff_id: str = "h-1", operation_id: str = "op-1") -> Handoff:
    return recording.record(handoff_id=handoff_id, operation_id=operation_id, part=part, value=value).handoff


def settle(handoff_id: str = "h-1", operation_id: str = "op-1") -> None:
    intake.apply([intake.SettleEntry(operation_id, handoff_id)])


@pytest.fixture
def parts(contracts) -> dict[str, object]:
    return dict(handoff_parts("waiting"))


def tile(html: str, code: str) -> tuple[str, int, str]:
    """(what the tile says, its count, the url it links to)."""
    found = html.split(f'id="count-{code.lower()}"')[1].split("</li>")[0]
    href = re.search(r'href="([^"]+)"', found).group(1).replace("&amp;", "&")
    return found, int(re.search(r'data-count="[A-Z_]+">([\d,]+)<', found).group(1)), href


def listed_rows(client, url: str) -> int:
    return client.get(url).content.decode().count('id="run-row-')


def test_a_tile_counts_an_unsettled_handoff_in_progress_and_its_link_lists_exactly_it(viewer_client, parts):
    receive("created", parts["created"])
    receive("reduced", parts["reduced"])  # no destination yet: DESTINATION_NOT_STARTED, in progress
    overview = viewer_client.get(reverse("sidewisp:overview")).content.decode()

    said, counted, href = tile(overview, "IN_PROGRESS")
    assert counted == 1 and "In progress" in said and "tone-bad" not in said
    assert listed_rows(viewer_client, href) == counted
    _, failing, href = tile(overview, "DESTINATION_NOT_STARTED")
    assert failing == 0 and listed_rows(viewer_client, href) == 0

    settle()
    overview = viewer_client.get(reverse("sidewisp:overview")).content.decode()

    _, failing, href = tile(overview, "DESTINATION_NOT_STARTED")
    assert failing == 1 and listed_rows(viewer_client, href) == 1
    _, pending, href = tile(overview, "IN_PROGRESS")
    assert pending == 0 and listed_rows(viewer_client, href) == 0


def test_every_tile_lists_as_many_runs_as_it_counts(viewer_client, contracts):
    healthy = dict(handoff_parts("healthy"))
    for n in range(3):  # one handoff per run: a tile counts handoffs, its link lists their runs
        for part in ("created", "reduced"):
            receive(part, healthy[part], f"h-{n}", f"op-{n}")
    settle("h-2", "op-2")
    overview = viewer_client.get(reverse("sidewisp:overview")).content.decode()

    counted = {code: tile(overview, code) for code in re.findall(r'id="count-([a-z_]+)"', overview)}
    for code, (_, n, href) in counted.items():
        assert listed_rows(viewer_client, href) == n, code
    assert (counted["in_progress"][1], counted["destination_not_started"][1]) == (2, 1)


def test_the_history_shows_a_step_in_progress_not_a_verdict(viewer_client, parts):
    handoff = receive("created", parts["created"])
    receive("reduced", parts["reduced"])

    html = viewer_client.get(reverse("sidewisp:run-history", args=[handoff.run_id])).content.decode()

    assert "Verdict: Stale control" not in html and "Verdict: Destination not started" not in html
    assert "In progress — waiting for the reduced receipt" in html
    assert "In progress — waiting for the destination receipt" in html


def test_the_history_keeps_the_verdict_once_it_is_settled(viewer_client, parts):
    handoff = receive("created", parts["created"])
    receive("reduced", parts["reduced"])
    settle()

    html = viewer_client.get(reverse("sidewisp:run-history", args=[handoff.run_id])).content.decode()

    assert "Verdict: Destination not started" in html  # the settlement made it one
    assert "In progress — waiting for the reduced receipt" in html  # the created step, before reduced came


def test_the_wait_boundary_is_not_unreached_above_an_open_wait_card(viewer_client, parts):
    receive("created", parts["created"])
    receive("reduced", parts["reduced"])
    handoff = receive("wait", parts["wait"])  # the destination is still due: in progress, its wait open

    html = viewer_client.get(reverse("sidewisp:run-detail", args=[handoff.run_id])).content.decode()

    wait = html.split(f'id="handoff-{handoff.pk}-wait"')[1].split("</tr>")[0]
    assert "data-wait" in html and "not reached" not in wait and "waiting" in wait
