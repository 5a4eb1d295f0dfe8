"""A user who logs out or is deactivated loses their live sockets at once (issue 29 §7), not at the next check.

Each socket re-checks its user every RESYNC_SECONDS (sidewisp.live.consumers); until then it kept receiving
frames. Now logging out, deactivating or deleting a user also sends one message through the channel layer to
every web process's hub (`USER_CHANGED`, on the health group they all listen to): the hub stops sending frames
to that user's sockets at once, and each closes, or (another session of the same user, still valid) is checked
and sent a fresh snapshot. A logout names its session by a digest (never the key itself): that session's
sockets close without a check, as the session is flushed only after the signal. When the channel layer is
down the message is lost and the periodic check closes the sockets as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from receipts.ingest.broadcast import HEALTH_GROUP

USER_CHANGED = "live.user"
SEND_TIMEOUT_SECONDS = 1.0
logger = logging.getLogger(__name__)


def session_digest(session_key: str | None) -> str:
    """What a message names a session by ("" for none): the key is a credential, kept off the channel layer."""
    return hashlib.sha256(session_key.encode()).hexdigest() if session_key else ""


def tell_hubs(user_id: int, *, session_key: str | None = None) -> None:
    """Tell every hub that `user_id` logged out (of that session) or changed; never raises."""
    message = {"type": USER_CHANGED, "user": user_id, "session": session_digest(session_key)}
    try:
        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(_send)(layer, message)
    except Exception as exc:  # noqa: BLE001 - Redis down: each socket's periodic check closes it later
        logger.warning("live sockets of a user not told at once: %s", type(exc).__name__)


async def _send(layer, message: dict) -> None:
    await asyncio.wait_for(layer.group_send(HEALTH_GROUP, message), SEND_TIMEOUT_SECONDS)


def on_logged_out(sender, request=None, user=None, **kwargs) -> None:
    """user_logged_out: that session's sockets close (the signal comes before the session is flushed)."""
    if user is not None and user.pk is not None:
        session = getattr(request, "session", None)
        tell_hubs(user.pk, session_key=getattr(session, "session_key", None))


def on_user_saved(sender, instance=None, **kwargs) -> None:
    """post_save of a user: an inactive one's sockets are checked once the change is committed."""
    if instance is not None and instance.pk is not None and not instance.is_active:
        transaction.on_commit(lambda: tell_hubs(instance.pk))


def on_user_deleted(sender, instance=None, **kwargs) -> None:
    if instance is not None and instance.pk is not None:
        pk = instance.pk
        transaction.on_commit(lambda: tell_hubs(pk))


def connect() -> None:
    """Called by the app's ready()."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.signals import user_logged_out
    from django.db.models.signals import post_delete, post_save

    user_model = get_user_model()
    user_logged_out.connect(on_logged_out, dispatch_uid="sidewisp-live-logout")
    post_save.connect(on_user_saved, sender=user_model, dispatch_uid="sidewisp-live-user-saved")
    post_delete.connect(on_user_deleted, sender=user_model, dispatch_uid="sidewisp-live-user-deleted")
