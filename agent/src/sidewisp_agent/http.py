"""The HTTP store: an app elsewhere sends its evidence to a Sidewisp server and takes its decisions back.

Entries go as one `POST /api/v1/receipts` per batch, stored all or none on the server (the same validation and
classification as a local run's); decisions come from `/api/v1/decisions/`. Every call carries the source token
and a timeout. Errors the writer and `await_decision` tell apart:

- `RemoteUnavailable` (transient): the server did not answer, answered 5xx or asked to slow down (429) even after
  a few quick retries (waiting its Retry-After, at most MAX_RETRY_AFTER); keep the entries and try again later.
- `RejectedEntry` (a `bundle.BundleError`): the server refused one entry, named by `index` and `field`; drop that
  one and send the others again.
- `RemoteRefused`: the server refused the call itself (a missing, revoked or wrong token, a body too large);
  retrying the same call will not help.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from . import bundle, config
from .elsewhere import Elsewhere
from .entries import Entry, to_json
from .kinds import DecisionKind

logger = logging.getLogger(__name__)

RECEIPTS_PATH = "/api/v1/receipts"
DECISIONS_PATH = "/api/v1/decisions/"
MAX_RETRY_AFTER = 30.0  # never sleep longer on a server's Retry-After before giving the call back
_ENTRY_FIELD = re.compile(r"entries\[(\d+)\]")


class RemoteError(Exception):
    """A call to the Sidewisp server failed."""


class RemoteUnavailable(RemoteError):
    """The server is away or overloaded: try again later (after `retry_after` seconds when it said so)."""

    transient = True  # the writer keeps the batch and retries it until the server takes it

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

    Connection errors, 5xx and 429 are retried `attempts` times in all, waiting `backoff`, then twice that and so
    on (or the server's Retry-After, at most MAX_RETRY_AFTER), before `RemoteUnavailable` is raised.
    """

    url: str
    token: str
    timeout: float = config.DEFAULT_TIMEOUT
    attempts: int = 3
    backoff: float = 0.5

    @classmethod
    def configured(cls, **options: float) -> Client:
        """A client on `config.current()` (`configure()` or SIDEWISP_URL/SIDEWISP_TOKEN); ConfigurationError."""
        found = config.current()
        return cls(url=found.url, token=found.token, timeout=found.timeout, **options)

    def call(self, method: str, path: str, data: bytes | None = None) -> tuple[int, dict]:
        """(status, decoded JSON answer) of a 2xx or 4xx answer other than 429; RemoteUnavailable otherwise.

        `data` is the request's JSON body, already encoded.
        """
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        attempt = 1
        while True:
            try:
                return self._send(method, self.url.rstrip("/") + path, data, headers)
            except RemoteUnavailable as exc:
                if attempt >= self.attempts:
                    raise
                wait = exc.retry_after if exc.retry_after is not None else self.backoff * 2 ** (attempt - 1)
                time.sleep(min(wait, MAX_RETRY_AFTER))
                attempt += 1

    def _send(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> tuple[int, dict]:
        try:
            response = httpx.request(method, url, content=data, headers=headers, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise RemoteUnavailable(type(exc).__name__) from None
        status = response.status_code
        if status == 429 or status >= 500:
            raise RemoteUnavailable(f"HTTP {status}", retry_after=_seconds(response.headers.get("Retry-After")))
        return status, _decoded(response.content)


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


def refusal(status: int, answer: dict) -> RemoteError:
    """The error a refused call (a 4xx other than 429) raises: the entry it names, or the call itself."""
    error = answer.get("error") if isinstance(answer.get("error"), dict) else {}
    field, message = str(error.get("field", "")), str(error.get("message", f"HTTP {status}"))
    if status != 401 and (match := _ENTRY_FIELD.match(field)):
        return RejectedEntry(int(match.group(1)), field, message, status)
    return RemoteRefused(status, field, message)


# Sidewisp keeps argument names only: an edit laid over nothing would drop the other arguments.
EDIT_NEEDS_PENDING = "an edit decision needs the pending interrupts: pass pending=graph.get_state(config).interrupts"
SERVER_LACKS_PENDING = "the server has no pending interrupts: pass pending=graph.get_state(config).interrupts"


class HttpStore(Elsewhere):
    """The store of an app elsewhere: its entries and decisions over the ingest API (see the module doc)."""

    def __init__(self, client: Client | None = None) -> None:
        self.client = client or Client.configured()

    def write(self, entries: Sequence[Entry]) -> None:
        """Post a batch of entries, all stored or none; raises the errors of the module doc."""
        if not entries:
            return
        encoded = []
        for index, entry in enumerate(entries):
            try:
                encoded.append(json.dumps(to_json(entry), allow_nan=False))
            except (TypeError, ValueError):
                raise RejectedEntry(index, f"entries[{index}].value", "is not JSON") from None
        body = '{"entries": [' + ", ".join(encoded) + "]}"
        status, answer = self.client.call("POST", RECEIPTS_PATH, body.encode())
        if status != 200:
            raise refusal(status, answer)

    def pending_decision(self, operation_id: str) -> dict | None:
        """The run's oldest unclaimed decision as `{"id", "type", "interrupts"}`, or None."""
        status, answer = self.client.call("GET", decision_path(operation_id))
        if status == 404:
            return None
        if status != 200:
            raise refusal(status, answer)
        return answer.get("decision")

    def claim_decision(self, operation_id: str, decision_id: int) -> dict | None:
        """Claim the decision once: `{"id", "type", "resume", "interrupts"}`, or None when another caller took it."""
        body = json.dumps({"decision": decision_id}).encode()
        status, answer = self.client.call("POST", decision_path(operation_id) + "/claim", body)
        if status in (404, 409):
            return None
        if status != 200:
            raise refusal(status, answer)
        return answer["decision"]

    def take_decision(self, operation_id: str, *, has_pending: bool) -> dict | None:
        """The run's oldest decision, claimed (see `store.Store`): one try per call, as `await_decision` polls.

        A reopen is the dashboard's own (`sidewisp.api` never offers one); `RemoteUnavailable` when the server
        does not answer.
        """
        once = HttpStore(dataclasses.replace(self.client, attempts=1))
        offered = once.pending_decision(operation_id)
        if offered is None:
            return None
        if offered["type"] == DecisionKind.EDIT and not has_pending:
            raise ValueError(EDIT_NEEDS_PENDING)
        if not has_pending and not offered["interrupts"]:
            raise ValueError(SERVER_LACKS_PENDING)
        return once.claim_decision(operation_id, offered["id"])

    def verify(self) -> None:
        """Ask the server once whether it takes this token: `ConfigurationError` when it refuses it.

        A server that is away is no configuration error (the writer keeps the entries until it is back): logged.
        """
        try:
            status, answer = Client(self.client.url, self.client.token, self.client.timeout, attempts=1).call(
                "GET", decision_path("sidewisp-configuration-check")
            )
        except RemoteUnavailable as exc:
            logger.warning("the Sidewisp server at %s did not answer (%s); receipts wait for it", _host(self), exc)
            return
        if status in (401, 403):
            msg = f"SIDEWISP_TOKEN was refused by the Sidewisp server at {_host(self)}: {refusal(status, answer)}"
            raise config.ConfigurationError(msg)


def _host(store: HttpStore) -> str:
    return urllib.parse.urlsplit(store.client.url).netloc


def decision_path(operation_id: str) -> str:
    return DECISIONS_PATH + urllib.parse.quote(operation_id, safe="")
