"""Logging filters: a refused request is one line, not a stack trace; nothing the database quotes is logged."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied


class NoTracebackForPermissionDenied(logging.Filter):
    """Drop the traceback Django attaches to "Forbidden (Permission denied)": a 403 is an answer, not a bug."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], PermissionDenied):
            record.exc_info = None
            record.exc_text = None
        return True


class HealthAnswersAreNotErrors(logging.Filter):
    """/healthz answering 503 is logged at INFO: the probe asked whether everything is up and was told "not yet".

    `make run`'s start-up watch asks until every process is up, and a load balancer asks every few seconds
    during an outage: as ERROR lines those greeted a newcomer with red before the start-up box and buried real
    errors during an outage. What is down is named on the System page, in /healthz's body and in `/metrics`.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        request = getattr(record, "request", None)
        if getattr(record, "status_code", None) == 503 and getattr(request, "path", None) == "/healthz":
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


class NoRoutineTaskLines(logging.Filter):
    """Beat's housekeeping says nothing when it goes well: no "Sending due task", "received" or "succeeded" line.

    CELERY_BEAT_SCHEDULE runs a heartbeat and a worker ping every 2 s and other sweeps every few seconds; their
    INFO lines (about three a second between worker and beat) scrolled `make run`'s start-up box away within
    seconds and bury what a run does in any log. Their warnings and errors still pass; other tasks' lines too.
    Attached to the three Celery loggers that write those lines.
    """

    def __init__(self) -> None:
        super().__init__()
        from django.conf import settings

        tasks = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
        # "Task <name>[<id>] received/succeeded" (worker) and "Sending due task <entry> (<name>)" (beat).
        self.marks = tuple(mark for task in sorted(tasks) for mark in (f"Task {task}[", f"({task})"))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        message = record.getMessage()
        return not any(mark in message for mark in self.marks)


class NoValuesFromTheDatabase(logging.Filter):
    """Nothing the database quotes reaches a log: a query's debug line and a database error's message both can.

    PostgreSQL's errors quote the values they refused (the DETAIL and CONTEXT lines: the start-run form's
    input was one), and Django's query lines at DEBUG carry the statement with its parameters. A record
    with such an error keeps its traceback frames and each exception's class (with its SQLSTATE or SQLite
    error name), never a message of the chain; a query line keeps its time, its statement's verb and its
    alias. Attached to the handler (every logger) and to the loggers that carry such records.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith("django.db.backends") and "sql" in record.__dict__:
            verb = str(record.__dict__["sql"] or "query").split(None, 1)[0]
            record.msg = "(%.3f) %s; alias=%s"
            record.args = (record.__dict__.get("duration") or 0.0, verb, record.__dict__.get("alias") or "")
            record.sql, record.params = verb, None  # a second pass (logger, then handler) finds the verb again
        if isinstance(record.args, tuple) and any(map(_from_database, record.args)):
            record.args = tuple(_named(arg) if _from_database(arg) else arg for arg in record.args)
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and any(map(_from_database, _chain(exc))):
            record.exc_text = _traceback_without_messages(exc)
            record.exc_info = None
        return True


def _from_database(value: object) -> bool:
    from django.db import Error

    if not isinstance(value, BaseException):
        return False
    return isinstance(value, Error) or type(value).__module__.split(".", 1)[0] in ("psycopg", "psycopg2", "sqlite3")


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what it came from (its cause, or the exception being handled), innermost first."""
    found: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in found:
        found.append(link)
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    return found[::-1]


def _named(exc: BaseException) -> str:
    """An exception as its class and code only, e.g. `django.db.utils.DataError (SQLSTATE 22P05)`."""
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
    for source in (exc, exc.__cause__):
        if code := getattr(source, "sqlstate", None):
            return f"{kind} (SQLSTATE {code})"
        if code := getattr(source, "sqlite_errorname", None):
            return f"{kind} ({code})"
    return kind


def _traceback_without_messages(exc: BaseException) -> str:
    # Every message of the chain goes: an exception raised while handling a database error may quote it.
    import traceback

    parts: list[str] = []
    for link in _chain(exc):
        if parts:
            parts.append(_CAUSED if link.__cause__ is not None else _DURING)
        frames = "".join(traceback.format_tb(link.__traceback__))
        parts.append(f"Traceback (most recent call last):\n{frames}{_named(link)} [message not logged]")
    return "".join(parts)


_CAUSED = "\n\nThe above exception was the direct cause of the following exception:\n\n"
_DURING = "\n\nDuring handling of the above exception, another exception occurred:\n\n"


def configuration(*, level: str) -> dict:
    """The LOGGING setting: one console handler, the filters above where they apply, the root at `level`."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
        "filters": {
            "no_403_traceback": {"()": "sidewisp.ops.logs.NoTracebackForPermissionDenied"},
            "health_answers": {"()": "sidewisp.ops.logs.HealthAnswersAreNotErrors"},
            # A database error's message and a query's parameters quote input values (issue 19 §2): never logged.
            "no_database_values": {"()": "sidewisp.ops.logs.NoValuesFromTheDatabase"},
            # Beat's housekeeping every few seconds logs nothing when it goes well (issue 30 §6: make run's box stays).
            "no_routine_tasks": {"()": "sidewisp.ops.logs.NoRoutineTaskLines"},
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["no_database_values"]}
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # The shell middleware logs every command and the workspace's absolute path at INFO.
            "langchain.agents.middleware.shell_tool": {"level": "WARNING"},
            # A 403 is one line ("Forbidden (Permission denied): /audit/"), without the exception's traceback.
            "django.request": {"filters": ["no_403_traceback", "health_answers", "no_database_values"]},
            # Django's own console handler (DEBUG) printed every request line a second time, unformatted.
            "django": {"handlers": [], "propagate": True},
            "django.security": {"filters": ["no_403_traceback"]},
            "django.db.backends": {"filters": ["no_database_values"]},
            "celery.beat": {"filters": ["no_routine_tasks"]},
            "celery.worker.strategy": {"filters": ["no_routine_tasks"]},
            "celery.app.trace": {"filters": ["no_routine_tasks"]},
        },
    }
