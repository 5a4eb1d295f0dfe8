"""`make bench`: run every benchmark and print one markdown table, the EXPLAIN block and the machine.

Each section is a module with `rows(quick) -> list[bench.table.Row]`, imported
only when its turn comes: a module that is missing or raises becomes a row
saying so (with the exception's class; the traceback goes to stderr) and the
others still run. Figures are printed, never judged: the exit status says only
whether PostgreSQL and Redis answered.

`--tiny` runs every section at a size that only proves it runs as shipped
(bench.sizes; tests/bench runs it in `make test`); `--quick` at one that gives
rough figures in a few minutes.

    .venv-bench/bin/python -m bench.run [--quick | --tiny] [--only SECTION ...] [--require-postgres]
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
import traceback
from contextlib import nullcontext
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

if __package__ in (None, ""):  # run as a script (python bench/run.py): the repository root is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import sizes
from bench.environment import setup_django, throwaway_database
from bench.table import Row, load_average, markdown

# In the order of issue 13's table; `api` (issue 14) is the recording path of agents that run elsewhere.
SECTIONS = {
    "overhead": "bench.overhead",
    "recording": "bench.recording",
    "api": "bench.api",
    "live": "bench.live",
    "pages": "bench.pages",
    "workers": "bench.workers",
    "map": "bench.map",  # the team map's layout and render (issue 21 §2): no database, no Redis
    "retention": "bench.retention",  # issue 22 §3: pruning 1M receipts while the pages are read
}
EXPLAIN_SECTION = "pages"
# Sections that load their data into DATABASE_URL's database as they find it: under `make bench` they get a
# throwaway one, so a fresh clone needs no migrated database and a real one is never written to.
ON_THROWAWAY_DATABASE = {"pages", "retention"}
# Sections that measure what only PostgreSQL has: on SQLite they say so and do not run.
NEEDS_POSTGRES = {"retention": "it prunes PostgreSQL's month partitions of the receipts"}


class ServiceDown(Exception):
    """PostgreSQL or Redis does not answer: one line for the user."""


def _where(url: str) -> str:
    """host:port/name of a service URL, never its user or password."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"


def check_services(*, require_postgres: bool) -> None:
    import redis
    from django.conf import settings
    from django.db import DatabaseError, connection

    if require_postgres and connection.vendor != "postgresql":
        msg = (
            f"make bench needs PostgreSQL: DATABASE_URL names {connection.display_name} (set DATABASE_URL=postgres://…)"
        )
        raise ServiceDown(msg)
    try:
        connection.ensure_connection()
    except DatabaseError as exc:
        msg = f"{connection.display_name} does not answer at {_where(settings.DATABASE_URL)} ({type(exc).__name__})"
        raise ServiceDown(msg) from exc
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2).ping()
    except (redis.RedisError, OSError) as exc:
        msg = f"Redis does not answer at {_where(settings.REDIS_URL)} ({type(exc).__name__})"
        raise ServiceDown(msg) from exc


def run_section(section: str, quick: bool) -> tuple[list[Row], str | None]:
    """The section's rows stamped with the load average while it ran, and its EXPLAIN block when it has one."""
    load = load_average()
    rows, explain = _section(section, quick)
    stamp = f"{load:.2f} → {load_average():.2f}"
    return [replace(row, load=stamp) for row in rows], explain


def _section(section: str, quick: bool) -> tuple[list[Row], str | None]:
    """The section's rows, and its EXPLAIN block when it has one; a row saying why when it could not run."""
    from django.db import connections

    module_name = SECTIONS[section]
    if section in NEEDS_POSTGRES and connections["default"].vendor != "postgresql":
        note = f"needs PostgreSQL ({NEEDS_POSTGRES[section]}); make bench runs it there"
        return [Row(section, f"{section} benchmark", "not run", note=note)], None
    started = time.monotonic()
    print(f"bench: {section} …", file=sys.stderr, flush=True)
    database = throwaway_database() if section in ON_THROWAWAY_DATABASE else nullcontext()
    try:
        with database:
            module = importlib.import_module(module_name)
            rows = list(module.rows(quick))
            explain = module.explain(quick) if section == EXPLAIN_SECTION else None
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return [Row(section, f"{section} benchmark", "not run", note=f"{module_name} is missing")], None
        return _failed(section, module_name, exc), None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
        return _failed(section, module_name, exc), None
    finally:
        connections.close_all()
        print(f"bench: {section} done in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return rows, explain


def _failed(section: str, module_name: str, exc: BaseException) -> list[Row]:
    traceback.print_exception(exc, file=sys.stderr)
    note = f"{module_name} raised {type(exc).__name__} (traceback on stderr)"
    return [Row(section, f"{section} benchmark", "not run", note=note)]


def machine(command: str) -> list[str]:
    import redis
    from django.conf import settings
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            database = f"PostgreSQL {cursor.fetchone()[0]}"
    else:
        import sqlite3

        database = f"SQLite {sqlite3.sqlite_version} (not PostgreSQL)"
    info = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2).info("server")
    return [
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- command: `{command}`",
        f"- CPU: {_cpu_model()}, {os.cpu_count()} cores",
        f"- Python {platform.python_version()} on {platform.system()} {platform.release()}",
        f"- {database}",
        f"- Redis {info.get('redis_version', 'unknown')}",
        f"- load average (1, 5, 15 min) at the end: {', '.join(f'{v:.2f}' for v in _load_averages())}",
        f"- size: {sizes.current()}",
    ]


def _load_averages() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes: rough figures in a few minutes")
    size.add_argument("--tiny", action="store_true", help="tiny sizes: every section runs, its figures mean nothing")
    parser.add_argument(
        "--only", action="append", choices=list(SECTIONS), metavar="SECTION", help=f"one of {', '.join(SECTIONS)}"
    )
    parser.add_argument("--require-postgres", action="store_true", help="refuse to run on anything but PostgreSQL")
    args = parser.parse_args(argv)
    sizes.use(sizes.TINY if args.tiny else sizes.QUICK if args.quick else sizes.FULL)
    setup_django()
    try:
        check_services(require_postgres=args.require_postgres)
    except ServiceDown as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    rows: list[Row] = []
    explains: list[str] = []
    for section in [s for s in SECTIONS if not args.only or s in args.only]:
        section_rows, explain = run_section(section, args.quick or args.tiny)
        rows += section_rows
        explains += [explain] if explain else []
    print(markdown(rows))
    if not args.only or EXPLAIN_SECTION in args.only:
        print("\n## EXPLAIN (ANALYZE) of each page's slowest query\n")
        print("\n".join(explains) or f"(none: bench.{EXPLAIN_SECTION} did not run; see its row)")
    print("\n## Machine\n")
    print("\n".join(machine(" ".join(["python -m bench.run", *(argv if argv is not None else sys.argv[1:])]))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
