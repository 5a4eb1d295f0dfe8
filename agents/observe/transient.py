"""Errors that say "the connection went away", not "this run is wrong".

A failover, a restarted Redis, a locked SQLite file: worth another try on a
fresh connection. The hosted runner lets these escape `observe` so the task
retries from the checkpoint (agents.host.execution); everything else fails the run.
"""

from __future__ import annotations

import sqlite3

import kombu.exceptions
import psycopg
import redis.exceptions
from django.db import InterfaceError, OperationalError

TRANSIENT: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    sqlite3.OperationalError,
    kombu.exceptions.OperationalError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)
