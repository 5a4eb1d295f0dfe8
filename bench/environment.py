"""What a benchmark process needs before it measures: Django set up, and a throwaway database.

`setup_django()` configures the app the way a deployment would (DEBUG off
unless set, so no query log slows the figures) on a Celery queue and channel
prefix of this process's own, so a benchmark never feeds a `make run` that
shares the Redis. `throwaway_database()` gives a fresh, migrated test database
(`test_sidewisp_<pid>` beside DATABASE_URL's) and drops it after. On PostgreSQL
the migrations run once per process, into a template the later ones are copied
from (`CREATE DATABASE … TEMPLATE`, well under a second instead of a migration
each); the template is dropped when the process exits.
"""

from __future__ import annotations

import atexit
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

    if connection.vendor == "postgresql":
        with _copied_database(connection) as name:
            yield name
        return
    original = connection.settings_dict["NAME"]
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        yield name
    finally:
        _close_other_sessions(connection)
        connection.creation.destroy_test_db(original, verbosity=0)


_templates: dict[str, str] = {}  # the original database's name -> its migrated template's


@contextmanager
def _copied_database(connection) -> Iterator[str]:
    original = connection.settings_dict["NAME"]
    template = _templates.get(original) or _migrated_template(connection, original)
    name = connection.creation._get_test_db_name()
    _execute(connection, f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    _use(connection, name)
    try:
        yield name
    finally:
        _close_other_sessions(connection)
        _use(connection, original)
        _execute(connection, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _migrated_template(connection, original: str) -> str:
    """Migrate a test database once and keep it, renamed, as the template of every later one."""
    migrated = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    template = f"{migrated}_template"
    _close_other_sessions(connection)
    _use(connection, original)
    _execute(connection, f'DROP DATABASE IF EXISTS "{template}"', f'ALTER DATABASE "{migrated}" RENAME TO "{template}"')
    _templates[original] = template
    atexit.register(_drop_template, connection, original, template)
    return template


def _drop_template(connection, original: str, template: str) -> None:
    _use(connection, original)
    _execute(connection, f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')


def _use(connection, name: str) -> None:
    # As create_test_db and destroy_test_db switch: the connection and the settings name the same database.
    from django.conf import settings

    connection.close()
    connection.settings_dict["NAME"] = name
    settings.DATABASES[connection.alias]["NAME"] = name


def _execute(connection, *statements: str) -> None:
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def _close_other_sessions(connection) -> None:
    # Threads the benchmark ran (LangGraph's executors) may still hold a session; PostgreSQL
    # refuses to drop a database that has one.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
