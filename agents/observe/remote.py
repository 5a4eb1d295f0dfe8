"""Remote mode on the server's settings: the agent package's HTTP store (`sidewisp_agent.http`), configured from
Django's `SIDEWISP_REMOTE_URL`/`SIDEWISP_REMOTE_TOKEN` for an app that runs Sidewisp's Django project.

One implementation: the client, its retries and its errors (`RemoteUnavailable`, `RejectedEntry`, `RemoteRefused`)
are the package's; this module only reads the settings. An app without Django uses `sidewisp_agent` directly.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from sidewisp_agent import http
from sidewisp_agent.http import (  # noqa: F401 - the server's callers read these as remote.X
    DECISIONS_PATH,
    MAX_RETRY_AFTER,
    RECEIPTS_PATH,
    HttpStore,
    RejectedEntry,
    RemoteError,
    RemoteRefused,
    RemoteUnavailable,
)


class Client(http.Client):
    @classmethod
    def from_settings(cls, **options: float) -> Client:
        url, token = settings.SIDEWISP_REMOTE_URL, settings.SIDEWISP_REMOTE_TOKEN
        if not url or not token:
            msg = "remote mode needs SIDEWISP_REMOTE_URL and SIDEWISP_REMOTE_TOKEN"
            raise ImproperlyConfigured(msg)
        return cls(url=url, token=token, timeout=settings.SIDEWISP_REMOTE_TIMEOUT, **options)


class RemoteSink(HttpStore):
    """The writer's sink in remote mode: the package's HTTP store on the server's settings."""

    def __init__(self, client: http.Client | None = None) -> None:
        super().__init__(client or Client.from_settings())
