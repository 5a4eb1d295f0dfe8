"""Live sockets per team (issue 22 §2), through the real ASGI application and the real Redis channel layer:
a socket of team A never receives a fragment (or a run id) of team B's runs."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from channels.db import database_sync_to_async

from receipts.models import Run, Team, TeamGraph
from receipts.org import teams
from tests.sidewisp.test_consumer import ORIGIN, TIMEOUT, marker, record_all, run_async, session_cookie, socket

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def members(person, contracts):
    """ann (team alpha, graph alpha-graph) and bo (team beta, graph beta-graph), both viewers."""
    ann, bo = person("ann", "viewer"), person("bo", "viewer")
    for user, slug in ((ann, "alpha"), (bo, "beta")):
        team = Team.objects.create(slug=slug, name=slug.title())
        TeamGraph.objects.create(team=team, graph=f"{slug}-graph")
        teams.add_member(user, team)
    return ann, bo


@database_sync_to_async
def _run_of(graph: str, operation_id: str) -> int:
    return Run.objects.create(operation_id=operation_id, thread_id=operation_id, graph=graph).pk


async def _until(communicator, text: str) -> list[str]:
    """Every message up to and including the first that contains `text`."""
    seen = []
    while True:
        message = await communicator.receive_from(timeout=TIMEOUT)
        seen.append(message)
        if text in message:
            return seen


@pytest.mark.parametrize("page", ["overview", "runs", "waits"])
def test_a_socket_of_team_a_never_receives_team_bs_fragments(members, page):
    ann, bo = members
    ann_cookie, bo_cookie = session_cookie(ann), session_cookie(bo)
    shown = "op-" if page == "runs" else "h-"  # the runs list names operations, the others handoffs

    async def body():
        alpha_socket = socket(f"/ws/health/?page={page}", ORIGIN, ann_cookie)
        beta_socket = socket(f"/ws/health/?page={page}", ORIGIN, bo_cookie)
        assert (await alpha_socket.connect())[0] and (await beta_socket.connect())[0]
        first_alpha = await alpha_socket.receive_from(timeout=TIMEOUT)  # the snapshots
        await beta_socket.receive_from(timeout=TIMEOUT)

        beta_run = await _run_of("beta-graph", "op-beta-1")
        await record_all("h-beta-1", "op-beta-1", "waiting")
        for_beta = await _until(beta_socket, f"{shown}beta-1")  # team B sees its own run
        assert f"{shown}beta-1" in for_beta[-1]

        # Then a change of team A's: everything team A's socket got until then holds nothing of team B's.
        await _run_of("alpha-graph", "op-alpha-1")
        await record_all("h-alpha-1", "op-alpha-1", "waiting")
        for_alpha = [first_alpha, *await _until(alpha_socket, f"{shown}alpha-1")]
        for message in for_alpha:
            assert "beta-1" not in message
            assert all(run != beta_run for run, _ in marker(message)["seqs"]), "a run id of team B in the marker"
        await alpha_socket.disconnect()
        await beta_socket.disconnect()

    run_async(body)


def test_sockets_of_two_team_sets_never_share_a_topic(members):
    ann, bo = members
    from sidewisp import pages

    scope = pages.PageScope("overview")
    assert pages.audience(scope, ann) != pages.audience(scope, bo)


def test_a_socket_asking_for_a_team_that_is_not_the_users_is_closed(members):
    ann, _ = members
    cookie = session_cookie(ann)

    async def body():
        refused = socket(f"/ws/health/?page=overview&filters={quote('team=beta')}", ORIGIN, cookie)
        connected, _ = await refused.connect()
        assert not connected
        own = socket(f"/ws/health/?page=overview&filters={quote('team=alpha')}", ORIGIN, cookie)
        assert (await own.connect())[0]
        assert re.search(r'id="ws-seq"', await own.receive_from(timeout=TIMEOUT))
        await own.disconnect()

    run_async(body)
