"""Which deployment this database belongs to: one random id, made at the first migration, read once per process.

Two Sidewisp deployments may share a Redis (and, by mistake or on purpose, a queue name). Task messages
carry row ids, which mean nothing in another database, so every message also names its deployment
(sidewisp.ops.envelope) and a worker runs only its own deployment's messages. `make run` derives its default
queue from the id, so deployments on one Redis do not even see each other's messages.
"""

from __future__ import annotations

import secrets

from django.db import IntegrityError, transaction

from receipts.models import Deployment

# Enough of the id to tell deployments apart in a queue name and a log line.
SHORT = 12

_cached: str | None = None


def current_id() -> str:
    """This database's deployment id (made here if no migration made it yet), cached for the process."""
    global _cached
    if _cached is None:
        _cached = ensure()
    return _cached


def ensure(key: str | None = None) -> str:
    """The stored deployment id; when there is none, store `key` (or a new random one) and return it."""
    found = Deployment.objects.filter(pk=1).values_list("key", flat=True).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return Deployment.objects.create(pk=1, key=key or new_key()).key
    except IntegrityError:
        # Another process made it first: theirs is the deployment's.
        return Deployment.objects.values_list("key", flat=True).get(pk=1)


def restore_after_flush() -> None:
    """A flush (test databases between tests) removes the row: put back the id this process already uses.

    Without it the next reader would make a new id and refuse every message this process sent. Called on
    post_migrate (which a flush sends); on a fresh database nothing is cached, so the migration's id stays.
    """
    if _cached is not None:
        ensure(_cached)


def new_key() -> str:
    return secrets.token_hex(16)


def short(key: str) -> str:
    return key[:SHORT]


def default_queue(key: str) -> str:
    """`make run`'s queue for this database when SIDEWISP_QUEUE is not set."""
    return f"sidewisp-{short(key)}"
