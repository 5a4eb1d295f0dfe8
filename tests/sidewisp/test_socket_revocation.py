"""Issue 29 §7: logging out or deactivating a user closes their live sockets at once, with no frame after.

Through the real ASGI application and the real Redis channel layer, with the periodic user check at its
production interval (5 s): what closes the socket within a second is the message the logout or the save sends.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from django.test import Client

from sidewisp.live import hub
from tests.sidewisp.test_consumer import ORIGIN, TIMEOUT, receive_until, record_all, run_async, socket

pytestmark = pytest.mark.django_db(transaction=True)
AT_ONCE = 1.0


def _logged_in(user) -> tuple[Client, tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    return client, (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


async def _open_and_settle(cookie, handoff_id: str):
    """A false-completions page's socket that has shown `handoff_id` and is sent nothing more for now."""
    communicator = socket("/ws/health/?page=false", ORIGIN, cookie)
    assert (await communicator.connect())[0]
    await communicator.receive_from(timeout=TIMEOUT)
    await record_all(handoff_id, f"op-{handoff_id}", "false_complete")
    await receive_until(communicator, handoff_id)
    while not await communicator.receive_nothing(timeout=0.3):  # the handoff's later parts' frames, if any
        await communicator.receive_output(timeout=TIMEOUT)
    return communicator


async def _closed_at_once_with_no_frame(communicator, started: float) -> None:
    """After the logout or the save, a new false completion would be sent to the page: the socket closes within
    a second and is sent nothing of it (a frame the hub sent before it was told may still be on its way)."""
    loop = asyncio.get_running_loop()
    await record_all("h-after", "op-after", "false_complete")
    while True:
        output = await communicator.receive_output(timeout=max(started + AT_ONCE - loop.time(), 0.01))
        if output["type"] == "websocket.close":
            break
        assert "h-after" not in output.get("text", ""), "a frame after the logout"
    assert loop.time() - started < AT_ONCE
    assert await communicator.receive_nothing(timeout=0.5)


def test_logging_out_closes_the_sessions_socket_within_a_second_with_no_frame_after(viewer, contracts):
    assert hub.RESYNC_SECONDS >= 5  # the periodic check is not what closes it
    client, cookie = _logged_in(viewer)

    async def body():
        communicator = await _open_and_settle(cookie, "h-before")
        started = asyncio.get_running_loop().time()
        response = await database_sync_to_async(client.post)("/logout/")
        assert response.status_code == 302
        await _closed_at_once_with_no_frame(communicator, started)

    run_async(body)


def test_deactivating_a_user_closes_their_socket_within_a_second_with_no_frame_after(viewer, contracts):
    _, cookie = _logged_in(viewer)

    async def body():
        communicator = await _open_and_settle(cookie, "h-before")
        started = asyncio.get_running_loop().time()
        viewer.is_active = False
        await database_sync_to_async(viewer.save)(update_fields=["is_active"])
        await _closed_at_once_with_no_frame(communicator, started)

    run_async(body)


def test_another_session_of_the_same_user_stays_open_and_is_caught_up(viewer, contracts):
    leaving, _ = _logged_in(viewer)
    _, staying = _logged_in(viewer)

    async def body():
        communicator = await _open_and_settle(staying, "h-before")
        await database_sync_to_async(leaving.post)("/logout/")
        await record_all("h-after", "op-after", "false_complete")
        await receive_until(communicator, "h-after")  # checked, still allowed: sent what it was held back from
        await communicator.disconnect()

    run_async(body)
