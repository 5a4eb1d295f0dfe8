"""The LangGraph checkpointer on the project's database."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import connection

# Creating the checkpoint tables is not safe to run concurrently (PostgreSQL's
# CREATE TABLE IF NOT EXISTS races on its catalog), so each process does it once,
# under a lock, and across processes under an advisory lock.
_SETUP_LOCK = threading.Lock()
_SET_UP: set[str] = set()
_ADVISORY_LOCK_ID = 0x5157_1DE


@contextmanager
def checkpointer() -> Iterator[Any]:
    """The Postgres saver with PostgreSQL, else a SQLite saver in a file beside the Django database."""
    if connection.vendor == "postgresql":
        from langgraph.checkpoint.postgres import PostgresSaver

        conninfo = _conninfo()
        with PostgresSaver.from_conn_string(conninfo) as saver:
            _set_up_once(conninfo, saver, advisory=True)
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = checkpoint_file()
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
    try:
        saver = SqliteSaver(conn)
        _set_up_once(str(path), saver, advisory=False)
        yield saver
    finally:
        conn.close()


def checkpoint_file() -> Path:
    """`<database>.checkpoints.sqlite3`: the test database gets its own file too."""
    database = Path(connection.settings_dict["NAME"])
    return database.with_name(f"{database.stem}.checkpoints.sqlite3")


def _set_up_once(key: str, saver: Any, *, advisory: bool) -> None:
    if key in _SET_UP:
        return
    with _SETUP_LOCK:
        if key in _SET_UP:
            return
        if advisory:
            saver.conn.execute("SELECT pg_advisory_lock(%s)", (_ADVISORY_LOCK_ID,))
        try:
            saver.setup()
        finally:
            if advisory:
                saver.conn.execute("SELECT pg_advisory_unlock(%s)", (_ADVISORY_LOCK_ID,))
        _SET_UP.add(key)


def _conninfo() -> str:
    db = connection.settings_dict
    parts = {
        "dbname": db.get("NAME"),
        "user": db.get("USER"),
        "password": db.get("PASSWORD"),
        "host": db.get("HOST"),
        "port": db.get("PORT"),
    }
    return " ".join(f"{key}={_quoted(str(value))}" for key, value in parts.items() if value)


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
