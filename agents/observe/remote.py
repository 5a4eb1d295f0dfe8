"""Remote mode: an app on another host sends its receipts to a Sidewisp server and takes decisions back.

With `SIDEWISP_REMOTE_URL` and `SIDEWISP_REMOTE_TOKEN` set, the batched writer
(agents.observe.writer) hands its entries to `RemoteSink`, which posts them to
`POST /api/v1/receipts`, and `agents.observe.decisions.await_decision` claims an
operator's decision through `/api/v1/decisions/<operation_id>`. Nothing here
touches a database.

What a failed call raises tells the caller what to do:

- `RemoteUnavailable`: the server did not answer, answered 5xx or asked to slow
  down (429) even after a few quick retries; keep the entries and try again later.
- `RejectedEntry` (a `bundle.BundleError`): the server refused one entry, named
  by `index` and `field`; drop that one and send the others again.
- `RemoteRefused`: the server refused the call itself (a missing, revoked or
  wrong token, a body too large); retrying the same call will not help.

The HTTP client is the standard library's, with a timeout on every call.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from receipts.ingest import intake
from receipts.verdicts import bundle

logger = logging.getLogger(__name__)

RECEIPTS_PATH = "/api/v1/receipts"
DECISIONS_PATH = "/api/v1/decisions/"
# Never sleep longer than this on a server's Retry-After before giving the call back to the caller.
MAX_RETRY_AFTER = 30.0
_ENTRY_FIELD = re.compile(r"entries\[(\d+)\]")


class RemoteError(Exception):
    """A call to the Sidewisp server failed."""


class RemoteUnavailable(RemoteError):
    """The server is away or overloaded: try again later (after `retry_after` seconds when it said so)."""

    transient = True  # agents.observe.writer keeps the batch and retries it until the server takes it

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RemoteRefused(RemoteError):
    """The server refused the call itself (`status`, and the `field` it named)."""

    def __init__(self, status: int, field: str, message: str) -> None:
        super().__init__(f"HTTP {status}: {field}: {message}")
        self.status = status
        self.field = field
        self.message = message


class RejectedEntry(bundle.BundleError):
    """The server refused entry number `index` of a batch; `field` names it (`entries[3].created.sender`);
    `status` is the HTTP status it answered (None: refused before it was sent)."""

    def __init__(self, index: int, field: str, message: str, status: int | None = None) -> None:
        super().__init__(field, message)
        self.index = index
        self.status = status


@dataclass(frozen=True)
class Client:
    """JSON over HTTP to one Sidewisp server with one source token.

    Connection errors, 5xx and 429 are retried `attempts` times in all, waiting
    `backoff`, then twice that and so on (or the server's Retry-After, at most
    MAX_RETRY_AFTER), before `RemoteUnavailable` is raised.
    """

    url: str
    token: str
    timeout: float = 10.0
    attempts: int = 3
    backoff: float = 0.5

    @classmethod
    def from_settings(cls, **options: float) -> Client:
        url, token = settings.SIDEWISP_REMOTE_URL, settings.SIDEWISP_REMOTE_TOKEN
        if not url or not token:
            msg = "remote mode needs SIDEWISP_REMOTE_URL and SIDEWISP_REMOTE_TOKEN"
            raise ImproperlyConfigured(msg)
        return cls(url=url, token=token, timeout=settings.SIDEWISP_REMOTE_TIMEOUT, **options)

    def call(self, method: str, path: str, data: bytes | None = None) -> tuple[int, dict]:
        """(status, decoded JSON answer) of a 2xx or 4xx answer other than 429; RemoteUnavailable otherwise.

        `data` is the request's JSON body, already encoded.
        """
        request = urllib.request.Request(self.url.rstrip("/") + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        attempt = 1
        while True:
            try:
                return self._send(request)
            except RemoteUnavailable as exc:
                if attempt >= self.attempts:
                    raise
                wait = exc.retry_after if exc.retry_after is not None else self.backoff * 2 ** (attempt - 1)
                time.sleep(min(wait, MAX_RETRY_AFTER))
                attempt += 1

    def _send(self, request: urllib.request.Request) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.status, _decoded(response.read())
        except urllib.error.HTTPError as exc:
            with exc:
                status, answer, retry_after = exc.code, _decoded(exc.read()), exc.headers.get("Retry-After")
            if status == 429 or status >= 500:
                raise RemoteUnavailable(f"HTTP {status}", retry_after=_seconds(retry_after)) from None
            return status, answer
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise RemoteUnavailable(type(exc).__name__) from None


def _decoded(raw: bytes) -> dict:
    try:
        answer = json.loads(raw or b"{}")
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _refusal(status: int, answer: dict) -> RemoteError:
    error = answer.get("error") if isinstance(answer.get("error"), dict) else {}
    field, message = str(error.get("field", "")), str(error.get("message", f"HTTP {status}"))
    if status != 401 and (match := _ENTRY_FIELD.match(field)):
        return RejectedEntry(int(match.group(1)), field, message, status)
    return RemoteRefused(status, field, message)


class RemoteSink:
    """The writer's sink in remote mode: posts a batch of entries, all stored or none (see the module doc)."""

    def __init__(self, client: Client | None = None) -> None:
        self.client = client or Client.from_settings()

    def write(self, entries: Sequence[intake.Entry]) -> None:
        if not entries:
            return
        encoded = []
        for index, entry in enumerate(entries):
            try:
                encoded.append(json.dumps(intake.to_json(entry), allow_nan=False))
            except (TypeError, ValueError):
                raise RejectedEntry(index, f"entries[{index}].value", "is not JSON") from None
        body = '{"entries": [' + ", ".join(encoded) + "]}"
        status, answer = self.client.call("POST", RECEIPTS_PATH, body.encode())
        if status != 200:
            raise _refusal(status, answer)


# --- decisions -----------------------------------------------------------------------


def pending_decision(operation_id: str, client: Client | None = None) -> dict | None:
    """The run's oldest unclaimed decision as `{"id", "type", "interrupts"}`, or None."""
    client = client or Client.from_settings(attempts=1)
    status, answer = client.call("GET", _decision_path(operation_id))
    if status == 404:
        return None
    if status != 200:
        raise _refusal(status, answer)
    return answer.get("decision")


def claim_decision(operation_id: str, decision_id: int, client: Client | None = None) -> dict | None:
    """Claim the decision once: `{"id", "type", "resume", "interrupts"}`, or None when another caller took it."""
    client = client or Client.from_settings(attempts=1)
    body = json.dumps({"decision": decision_id}).encode()
    status, answer = client.call("POST", _decision_path(operation_id) + "/claim", body)
    if status in (404, 409):
        return None
    if status != 200:
        raise _refusal(status, answer)
    return answer["decision"]


def _decision_path(operation_id: str) -> str:
    return DECISIONS_PATH + urllib.parse.quote(operation_id, safe="")
