"""The LangGraph checkpointer on the project's database."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import connection


@contextmanager
def checkpointer() -> Iterator[Any]:
    """The Postgres saver with PostgreSQL, else a SQLite saver in a file beside the Django database.

    Its tables exist already: migration agents 0006 creates them (`set_up_tables`).
    Creating them from every task raced on a fresh PostgreSQL database (the
    advisory lock around it deadlocked when 16 runs started at once), so tasks
    never do. SqliteSaver still checks its tables on first use (SQLite serializes
    that), which covers a checkpoint file removed after migrating.
    """
    if connection.vendor == "postgresql":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(_conninfo()) as saver:
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(checkpoint_file()), check_same_thread=False, timeout=30)
    try:
        yield SqliteSaver(conn)
    finally:
        conn.close()


def set_up_tables() -> None:
    """Create or upgrade the checkpointer's tables (LangGraph's own migrations; idempotent).

    Run once, by `migrate` (agents migration 0006), before any worker drives a run.
    """
    with checkpointer() as saver:
        saver.setup()


def checkpoint_file() -> Path:
    """`<database>.checkpoints.sqlite3`: the test database gets its own file too."""
    database = Path(connection.settings_dict["NAME"])
    return database.with_name(f"{database.stem}.checkpoints.sqlite3")


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
