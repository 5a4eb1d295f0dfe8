"""What a benchmark process needs before it measures: Django set up, and a throwaway database.

`setup_django()` configures the app the way a deployment would (DEBUG off
unless set, so no query log slows the figures) on a Celery queue and channel
prefix of this process's own, so a benchmark never feeds a `make run` that
shares the Redis. `throwaway_database()` creates and migrates a fresh test
database (`test_sidewisp_<pid>` beside DATABASE_URL's) and drops it after.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_django() -> None:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sidewisp.settings")
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    os.environ.setdefault("SIDEWISP_QUEUE", f"sidewisp-bench-{os.getpid()}")
    import django

    django.setup()


@contextmanager
def throwaway_database() -> Iterator[str]:
    """A freshly migrated test database for the duration; yields its name."""
    from django.db import connection

    original = connection.settings_dict["NAME"]
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        yield name
    finally:
        _close_other_sessions(connection)
        connection.creation.destroy_test_db(original, verbosity=0)


def _close_other_sessions(connection) -> None:
    # Threads the benchmark ran (LangGraph's executors) may still hold a session; PostgreSQL
    # refuses to drop a database that has one.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
