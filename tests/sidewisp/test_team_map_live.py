"""The team map live: its socket, through the real ASGI application and the real Redis channel layer."""

from __future__ import annotations

import pytest

from tests.sidewisp.test_consumer import ORIGIN, TIMEOUT, marker, receive_until, record_all, run_async, session_cookie
from tests.sidewisp.test_consumer import socket as open_socket

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_handoff_recorded_while_the_map_is_open_appears_on_its_arrow(viewer, record_handoff):
    record_handoff("h-before", "op-before", "healthy")
    cookie = session_cookie(viewer)

    async def body():
        communicator = open_socket("/ws/health/?page=map&filters=window%3D1h", ORIGIN, cookie)
        assert (await communicator.connect())[0]
        first = await communicator.receive_from(timeout=TIMEOUT)
        assert 'id="team-map"' in first and marker(first)["kind"] == "snapshot"
        assert 'data-route="triage → sales" data-scope="parent" data-count="1"' in first
        assert 'data-route="triage → support" data-scope="parent" data-count="0"' in first
        await record_all("h-new", "op-new", "stale_control", receiver="support")
        # Parts are recorded one at a time: an earlier message may show the handoff still in progress.
        failing = 'class="map-route route-failing" data-route="triage → support" data-scope="parent" data-count="1"'
        await receive_until(communicator, failing)
        await communicator.disconnect()

    run_async(body)
