"""Shared fixtures. Integration tests use the real Redis at REDIS_URL and the real database."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@pytest.fixture
def contracts(db):
    """The demo team's contracts (a flush between transactional tests removes the migrated ones)."""
    from agents.demo.contracts import install_team_contracts
    from receipts.ingest.contracts import current_contracts

    install_team_contracts()
    return current_contracts()


@pytest.fixture
def no_enqueue(monkeypatch):
    """For tests that drive the run in-process: what would have been enqueued, by task name."""
    from agents import tasks

    sent: list[tuple[str, int]] = []
    for task in (tasks.start_run, tasks.resume_run, tasks.reverify):
        monkeypatch.setattr(task, "delay", lambda pk, name=task.name: sent.append((name, pk)))
    return sent


@pytest.fixture(autouse=True)
def fresh_graphs() -> Iterator[None]:
    """Every test builds its hosted graphs anew: one test's patched scenario never reaches another's run."""
    from agents.host import graphcache

    graphcache.forget()
    yield
    graphcache.forget()


# --- A real Celery worker, in its own process, on the real Redis and test database ---


@pytest.fixture(scope="session", autouse=True)
def celery_isolation() -> str:
    """A queue, control exchange, channel prefix and cache key prefix of this test process's own.

    No other worker on the same Redis takes its tasks or answers its pings, no other run's events reach its
    sockets, and no other run's cache writes (the team switcher's generation, the alert rules' version, a rate
    limit's count) reach its pages: two `make test` runs, or the workers of one parallel run (pytest-xdist),
    share a Redis without seeing each other. Worker processes and daphne get the same name through
    SIDEWISP_QUEUE (settings derive the cache prefix from it).
    """
    from channels.layers import channel_layers
    from django.conf import settings
    from django.core.cache import caches

    from sidewisp.celery import app

    name = f"sidewisp-test-{os.getpid()}"
    app.conf.task_default_queue = name
    app.conf.control_exchange = name
    # What the app reads for its own per-deployment Redis keys (heartbeats, metrics counters, locks).
    settings.CELERY_TASK_DEFAULT_QUEUE = settings.CELERY_CONTROL_EXCHANGE = name
    settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = name
    channel_layers.backends.clear()
    settings.CACHES["default"]["KEY_PREFIX"] = name
    _forget_caches(caches)
    return name


def _forget_caches(caches) -> None:
    """The cache handler builds its caches again from settings.CACHES (what Django's own tests do when
    CACHES changes: django.test.signals.clear_cache_handlers)."""
    from asgiref.local import Local

    caches.close_all()
    caches._settings = caches.settings = caches.configure_settings(None)
    caches._connections = Local()


@pytest.fixture(scope="session", autouse=True)
def isolated_var_dir(tmp_path_factory) -> Iterator[str]:
    """Workspaces and other run files of this test run go to a temporary folder, not var/."""
    from django.conf import settings

    original = settings.VAR_DIR
    settings.VAR_DIR = tmp_path_factory.mktemp("var")
    yield str(settings.VAR_DIR)
    settings.VAR_DIR = original


@pytest.fixture(scope="session", autouse=True)
def quick_flush() -> Iterator[None]:
    """On PostgreSQL a transactional test ends by emptying every table with DELETE rather than TRUNCATE.

    Django's flush TRUNCATEs the 42 tables (and partitions), which makes new files for each table and index:
    about 1.5 s per transactional test here, against some 30 ms for DELETE on the few rows a test leaves. The
    result is the same (every table empty, sequences left as TRUNCATE without RESTART IDENTITY leaves them).
    Twice over: the first pass fires the handoff delete trigger, which books -n into receipts_verdictbucket,
    and the second empties that. Foreign keys are deferred, so the order does not matter. A test that asks for
    reset sequences (or a cascade) gets Django's own TRUNCATE. test_flush_empties_every_table proves it.
    """
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        deletes = [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(t))};" for t in tables]
        return deletes + deletes

    DatabaseOperations.sql_flush = sql_flush
    yield
    DatabaseOperations.sql_flush = truncate


@pytest.fixture(scope="session", autouse=True)
def quick_password_hashing() -> Iterator[None]:
    """Passwords hashed at one PBKDF2 iteration in this process (tests/hashers.py says why that is safe): a
    million iterations cost a second per user made with a password and per login, most of some tests' time."""
    from django.conf import settings
    from django.test import override_settings

    quick = override_settings(
        PASSWORD_HASHERS=["tests.hashers.OneIterationPBKDF2PasswordHasher", *settings.PASSWORD_HASHERS]
    )
    quick.enable()
    yield
    quick.disable()


def subprocess_environ() -> dict[str, str]:
    """This process's environment for a server or worker it starts, without DJANGO_ALLOW_ASYNC_UNSAFE: the
    browser tests set it for themselves (tests/e2e/conftest.py `browser`), never for the code they test."""
    return {key: value for key, value in os.environ.items() if key != "DJANGO_ALLOW_ASYNC_UNSAFE"}


def database_url_for_subprocess() -> str:
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@dataclass
class WorkerProcess:
    name: str
    process: subprocess.Popen
    env: dict[str, str]

    @property
    def hostname(self) -> str:
        return f"{self.name}@{socket.gethostname()}"

    def answers(self, timeout: float = 1.0) -> bool:
        from sidewisp.celery import app

        return bool(app.control.ping(destination=[self.hostname], timeout=timeout))

    def busy(self) -> bool:
        """Tasks are still queued for this worker, or running, reserved or scheduled in it."""
        from sidewisp.celery import app

        with app.connection_for_write() as conn:
            if conn.default_channel.client.llen(app.conf.task_default_queue):
                return True
        inspect = app.control.inspect(destination=[self.hostname], timeout=1)
        return any(
            reply and any(reply.values()) for reply in (inspect.active(), inspect.reserved(), inspect.scheduled())
        )

    def kill(self) -> None:
        """SIGKILL the whole worker: no shutdown, no ack of what it was running."""
        self.process.kill()
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


def start_worker_process(
    name: str,
    queue: str,
    *,
    concurrency: int = 2,
    extra_env: dict[str, str] | None = None,
    redis_url: str | None = None,
    beat: bool = False,
    pool: str = "threads",
) -> WorkerProcess:
    """A Celery worker process on this test run's queue; `extra_env` adds settings (e.g. SIDEWISP_GRAPHS).

    `redis_url` points it at another Redis than the tests' (a fault test's private one: point this process
    at it too, with `point_celery_at`); `beat` embeds Celery beat, so the periodic sweeps run as in production;
    `pool="prefork"` runs tasks in child processes, as `make run` does (a killed child's task comes back at once).
    """
    from django.conf import settings

    env = {
        **subprocess_environ(),
        "DATABASE_URL": database_url_for_subprocess(),
        "SIDEWISP_QUEUE": queue,
        "REDIS_URL": redis_url or settings.REDIS_URL,
        # A dead worker's task comes back in seconds rather than half a minute.
        "CELERY_VISIBILITY_TIMEOUT": "5",
        "SIDEWISP_LEASE_SECONDS": "6",
        "SIDEWISP_VAR_DIR": str(settings.VAR_DIR),
        **(extra_env or {}),
    }
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "sidewisp",
        "worker",
        "-P",
        pool,
        "-c",
        str(concurrency),
        "-n",
        f"{name}@%h",
        "-l",
        "WARNING",
        "--without-gossip",
        "--without-mingle",
    ]
    if beat:
        command += ["-B", "-s", str(settings.VAR_DIR / f"beat-schedule-{name}")]
    process = subprocess.Popen(command, cwd=settings.BASE_DIR, env=env)
    worker = WorkerProcess(name=name, process=process, env=env)
    deadline = time.monotonic() + 60
    while not worker.answers():
        if process.poll() is not None or time.monotonic() > deadline:
            worker.stop()
            pytest.fail(f"the Celery worker {name} did not start")
    return worker


@contextlib.contextmanager
def point_celery_at(url: str) -> Iterator[None]:
    """This process's Celery app publishes to (and pings workers through) the broker at `url` for the duration.

    A dead port makes the broker unreachable for real: publishing fails the way it does when Redis is down.
    """
    from sidewisp.celery import app

    saved = app.conf.broker_url
    _switch_broker(app, url)
    try:
        yield
    finally:
        _switch_broker(app, saved)


def _switch_broker(app, url: str) -> None:
    # The app keeps its connection and producer pools once made: drop them, so the next publish connects to `url`.
    # Not closed: kombu's registry hands the same producer pool out again when the app comes back to a URL.
    app._pool = None
    app.amqp._producer_pool = None
    app.conf.broker_url = url


def wait_until(predicate, *, what: str, timeout: float = 60.0, interval: float = 0.2) -> None:
    """Poll `predicate` until it holds; fail the test naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def worker_options() -> dict:
    """What worker_process passes to start_worker_process besides its name and queue: a module that needs
    more (beat=True) overrides this fixture."""
    return {}


@pytest.fixture
def worker_process(transactional_db, celery_isolation, worker_options) -> Iterator[WorkerProcess]:
    """A real Celery worker process on this test process's queue, for one test: no cache of its outlives it."""
    worker = start_worker_process(f"w{os.getpid()}", celery_isolation, **worker_options)
    yield worker
    worker.stop()


# --- operator pages (issue 4) ---------------------------------------------------


def _user_with_viewer_permission(django_user_model, username: str):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user(username=username, password="pw-for-tests-only-1")
    user.user_permissions.add(Permission.objects.get(codename="view_dashboard", content_type__app_label="receipts"))
    return user


@pytest.fixture
def viewer(django_user_model):
    """Holds the viewer permission (receipts.view_dashboard) and nothing else."""
    return _user_with_viewer_permission(django_user_model, "viewer")


@pytest.fixture
def outsider(django_user_model):
    """Logged in, but without the viewer permission."""
    return django_user_model.objects.create_user(username="outsider", password="pw-for-tests-only-1")


@pytest.fixture
def viewer_client(client, viewer):
    client.force_login(viewer)
    return client


def handoff_parts(kind: str, *, sender: str = "triage", receiver: str = "sales", deadline=None) -> list:
    """The (part, value) receipts, in recording order, that give a handoff the verdict `kind` names."""
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    iso = lambda t: t.isoformat().replace("+00:00", "Z")  # noqa: E731
    from agents.demo.contracts import team_contracts

    keys = team_contracts()["routes"]["routes/1"].get(sender, {}).get(receiver, [])
    parts: list = [
        (
            "created",
            {
                "sender": sender,
                "receiver": receiver,
                "route_version": "routes/1",
                "tool_call_id": "call_1",
                "required_context_keys": keys,
                "at": iso(now),
            },
        ),
        (
            "reduced",
            {
                "goto": receiver,
                "active_agent_before": sender,
                "active_agent_after": receiver,
                "graph_scope": "parent",
                "tool_message_ids": ["call_1"],
                "context_keys": keys,
                "at": iso(now),
            },
        ),
        ("destination", {"node_id": receiver, "started_at": iso(now), "attempt_id": "a-1"}),
    ]
    if kind == "waiting":
        deadline = deadline or now + timedelta(hours=1)
        parts.append(
            (
                "wait",
                {
                    "owner": "viewer",
                    "reason": "purchase_approval",
                    "deadline_utc": iso(deadline),
                    "resume_token_id": "token-55d0",
                    "state_persisted": True,
                    "resolved": False,
                },
            )
        )
        parts.append(("final_status", "waiting"))
    elif kind == "false_complete":
        parts.append(("final_status", "complete"))
    elif kind == "healthy":
        parts.append(
            (
                "verification",
                {
                    "verifier": "order_exists",
                    "result": "pass",
                    "checked_at": iso(now + timedelta(seconds=1)),
                    "receipt_id": "v-1",
                },
            )
        )
        parts.append(("final_status", "complete"))
    elif kind == "stale_control":
        parts[1] = ("reduced", {**parts[1][1], "active_agent_after": sender})
    return parts


@pytest.fixture
def record_handoff(contracts):
    """record_handoff("h-1", "op-1", "healthy") records every receipt of one handoff through record()."""
    from receipts.ingest.recording import record

    def _record(handoff_id: str, operation_id: str, kind: str = "healthy", **kwargs):
        result = None
        for part, value in handoff_parts(kind, **kwargs):
            result = record(handoff_id=handoff_id, operation_id=operation_id, part=part, value=value)
        return result.handoff

    return _record


# --- operator actions (issue 5) ---------------------------------------------------


@pytest.fixture
def roles(db):
    """The role groups (transactional tests flush the ones the migration made)."""
    from receipts.org.roles import ensure_groups

    return ensure_groups()


@pytest.fixture
def person(roles, django_user_model):
    """person("ops-lead", "approver") is a user in those role groups."""

    def _person(username: str, *group_names: str, password: str | None = None, **fields):
        # No password unless asked for: hashing one costs a fifth of a second, and force_login needs none.
        user = django_user_model.objects.create_user(username=username, password=password, **fields)
        user.groups.set([roles[name] for name in group_names])
        return user

    return _person


@pytest.fixture
def owner(person):
    """ops-lead, an approver: the owner of the demo's approval waits."""
    return person("ops-lead", "approver")


@pytest.fixture
def operator(person):
    """oncall, an operator."""
    return person("oncall", "operator")


def record_wait_for(handoff, **changes):
    """Record a new `wait` part for `handoff` with `changes` applied (a distinct attempt each time)."""
    import uuid

    from receipts.ingest.recording import record

    wait = {**(handoff.wait_part or {}), **changes}
    return record(
        handoff_id=handoff.handoff_id,
        operation_id=handoff.run.operation_id,
        part="wait",
        value=wait,
        attempt=f"test-{uuid.uuid4().hex[:8]}",
    ).handoff


@pytest.fixture
def scenario_handoff(record_handoff):
    """scenario_handoff("waiting", scenario="waiting_on_approval", owner="ops-lead"): recorded evidence on a hosted
    run of the demo graph's scenario (so actions treat it as resumable), without running the graph."""
    import uuid

    from receipts.models import Run

    def _make(kind: str, *, scenario: str, owner: str | None = None, **kwargs):
        token = uuid.uuid4().hex[:10]
        Run.objects.create(
            operation_id=f"op-{token}", thread_id=f"th-{token}", graph="demo", scenario=scenario, mode=Run.Mode.HOSTED
        )
        handoff = record_handoff(f"h-{token}", f"op-{token}", kind, **kwargs)
        if owner is not None:
            handoff = record_wait_for(handoff, owner=owner or None)
        return handoff

    return _make


# --- issue 13: the batched evidence writer (agents.observe.writer) ------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem) -> None:
    """Before a test's database is flushed: what it submitted is written (no stray rows in the next test);
    after the last test: the writer's thread and connection end (PostgreSQL drops a test database only
    when no session uses it)."""
    import sys

    writer = sys.modules.get("agents.observe.writer")
    if writer is None:
        return
    if nextitem is None:
        writer.shutdown(timeout=10)
    else:
        writer.flush(timeout=10)


# --- end issue 13


@pytest.fixture
def make_team(db):
    """make_team("alpha", graphs=["demo"], sources=["billing"]) is a team (named "Alpha") owning those graphs
    and remote sources (issue 22 §2)."""
    from receipts.models import Team, TeamGraph, TeamSource

    def _make(slug: str, *, graphs=(), sources=()):
        team = Team.objects.create(slug=slug, name=slug.title())
        for graph in graphs:
            TeamGraph.objects.create(team=team, graph=graph)
        for source in sources:
            TeamSource.objects.create(team=team, source_name=source)
        return team

    return _make


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The migrated test database without the default alert rules (issue 30 §5): a test adds the rules it
    means to evaluate (tests/receipts/test_default_alert_rules.py migrates a fresh database to see them)."""
    from receipts.models import AlertRule, NotificationChannel

    with django_db_blocker.unblock():
        AlertRule.objects.all().delete()
        NotificationChannel.objects.all().delete()


# --- issue 32 §5: parallel runs (pytest-xdist) and no silent skips ---------------------------------------------

# What runs in turn on one xdist worker (`make test` runs two), by path: a folder (every file under it is one
# unit) or a file. The fault tests kill and restart private Redis servers under real worker processes, with
# recovery bounds; a browser module shares one Chromium and one daphne (tests/e2e/conftest.py); the modules that
# run apps in the fresh virtualenv share that virtualenv (built once per process: tests/agents/conftest.py).
# Everything else is handed out test by test.
SERIAL_FOLDERS = {
    "tests/faults/": "tests/faults/",
    "tests/agents/test_agent_package.py": "the fresh virtualenv",
    "tests/agents/test_agent_venv_swarm.py": "the fresh virtualenv",
}
MODULES_KEPT_WHOLE = ("tests/e2e/",)


def xdist_scope(nodeid: str) -> str:
    """The unit of work one xdist worker takes whole: a serial folder or set of modules, a module kept whole,
    or one test."""
    path = nodeid.split("::", 1)[0]
    for prefix, unit in SERIAL_FOLDERS.items():
        if path.startswith(prefix):
            return unit
    return path if path.startswith(MODULES_KEPT_WHOLE) else nodeid


@pytest.hookimpl
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` (pyproject addopts) with the groups of `xdist_scope`.

    Not xdist_group marks: pytest-xdist 3.8 groups by renaming a test's node id, which pytest 9.2 no longer
    reads (every marked test was handed out on its own). Other --dist modes are xdist's own.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByPath(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    # Units in collection order, never biggest first (xdist's default): pytest-django puts the tests that flush
    # the database (transactional) after those that read what the migrations made (groups, the default team,
    # the contracts), and a unit of flushing tests handed out first emptied those tables for everyone after it.
    config.option.loadscopereorder = False
    return ByPath(config, log)


def skip_summary(skipped_reports) -> str:
    """The run's last line: how many tests were skipped, and why (each reason with its count)."""
    from collections import Counter

    reasons = Counter()
    for report in skipped_reports:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if not reasons:
        return "sidewisp: 0 tests skipped"
    why = "; ".join(f"{n} because {reason}" for reason, n in reasons.most_common())
    total = sum(reasons.values())
    return f"sidewisp: {total} test{'s' if total != 1 else ''} skipped: {why}"


def pytest_unconfigure(config) -> None:
    """After pytest's own summary line, one more: the skips and their reasons (none is silent)."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller, which receives every report, says it once
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or not any(reporter.stats.get(key) for key in ("passed", "failed", "skipped", "error")):
        return
    reporter.write_line(skip_summary(reporter.stats.get("skipped", [])), bold=True)
