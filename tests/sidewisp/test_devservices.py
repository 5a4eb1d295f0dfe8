"""`make run`'s supervisor: a child that dies is started again; the others keep running."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time

import pytest
import redis

from sidewisp.ops import devenv
from sidewisp.ops.devservices import (
    Supervisor,
    _free_port,
    default_queue,
    http_answers,
    shown_url,
)
from sidewisp.ops.startbox import StartupWatch, demo_accounts, health, startup_box
from tests.conftest import wait_until


def test_a_dying_child_is_restarted_with_a_log_line_while_the_others_keep_running(tmp_path, capsys):
    starts = tmp_path / "starts"
    children = {
        "worker": [sys.executable, "-c", f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)"],
        "web": [sys.executable, "-c", "import time; time.sleep(60)"],
    }
    supervisor = Supervisor(children, env={}, cwd=tmp_path)
    supervisor.backoff = dict.fromkeys(children, 0.1)
    try:
        supervisor.run(until=time.monotonic() + 3, interval=0.05)
        web = supervisor.processes["web"]
        assert web.poll() is None
        assert supervisor.restarts["web"] == 0
    finally:
        supervisor.stop()
    assert len(starts.read_text()) >= 3
    assert supervisor.restarts["worker"] >= 2
    assert "sidewisp: worker exited with code 3; restarting in" in capsys.readouterr().out


def test_the_backoff_doubles_while_a_child_keeps_dying_up_to_its_cap(tmp_path):
    supervisor = Supervisor({"beat": [sys.executable, "-c", "raise SystemExit(1)"]}, env={}, cwd=tmp_path)
    supervisor.backoff["beat"] = 20.0
    try:
        supervisor.run(until=time.monotonic() + 1, interval=0.05)
    finally:
        supervisor.stop()
    assert supervisor.backoff["beat"] == Supervisor.MAX_BACKOFF
    assert supervisor.restarts["beat"] == 0  # still waiting out the first 20 s


# --- issue 19 §1: make run says which Redis and queue it uses, and "open" only once the server answers ----


def test_a_redis_url_is_shown_without_its_password():
    assert shown_url("redis://:s3cret@cache.example:6380/2") == "redis://cache.example:6380/2"
    assert shown_url("rediss://app:s3cret@[::1]:6379/0") == "rediss://app@[::1]:6379/0"
    assert shown_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


def test_the_queue_is_sidewisp_queue_when_set():
    assert default_queue({"SIDEWISP_QUEUE": "ours"}) == "ours"


def test_make_run_names_its_redis_and_its_databases_own_queue_and_says_open_once_the_server_answers(tmp_path):
    from django.conf import settings

    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("SIDEWISP_QUEUE", "DEBUG")}
    env |= {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'run.sqlite3'}",
        "SIDEWISP_VAR_DIR": str(tmp_path / "var"),
        "REDIS_URL": settings.REDIS_URL,
        "PORT": str(port),
        "SIDEWISP_DEMO_RATE": "0",
        "SIDEWISP_WORKER_CONCURRENCY": "1",
    }
    command = [sys.executable, "-m", "sidewisp.ops.devservices", "run"]
    process = subprocess.Popen(command, env=env, cwd=settings.BASE_DIR, stdout=subprocess.PIPE, text=True)
    said: list[str] = []
    try:
        for line in process.stdout:
            said.append(line.rstrip())
            if line.startswith("| sidewisp: open"):
                answered = http_answers(f"http://127.0.0.1:{port}/login/")
            if line.startswith("+-") and any(seen.startswith("| sidewisp: open") for seen in said):
                break  # the start-up box's last line
        queue = next(line.split()[2] for line in said if line.startswith("sidewisp: queue "))
        client = redis.Redis.from_url(settings.REDIS_URL)
        try:
            # The worker and beat that make run started declared (and use) the queue it named.
            wait_until(lambda: client.exists(f"_kombu.binding.{queue}"), what="make run's processes to use its queue")
        finally:
            client.delete(queue, f"_kombu.binding.{queue}")
            client.close()
    finally:
        process.terminate()  # make run stops every child it started
        process.wait(timeout=60)
    redis_line = next(line for line in said if line.startswith("sidewisp: Redis "))
    assert redis_line == f"sidewisp: Redis {settings.REDIS_URL} (REDIS_URL)"
    assert re.fullmatch(r"sidewisp-[0-9a-f]{12}", queue)
    assert said.index(redis_line) < next(i for i, line in enumerate(said) if line.startswith("sidewisp: queue "))
    # Issue 30 §6: start-up ends with one box holding the address and the new demo accounts' passwords.
    box = said[next(i for i, line in enumerate(said) if line.startswith("| sidewisp: open")) - 1 :]
    assert box[0] == box[-1] and set(box[0]) == {"+", "-"}
    assert box[1].startswith(f"| sidewisp: open http://127.0.0.1:{port}/  (Ctrl-C stops everything)")
    logins = [re.search(r"login (\S+) +password (\S+)", line) for line in box]
    assert sorted(found[1] for found in logins if found) == ["admin", "operator", "ops-lead", "viewer"]
    assert all(len(found[2]) >= 16 for found in logins if found)
    assert any("python manage.py demo_passwords" in line for line in box)
    assert not any("password" in line for line in said[: -len(box)])  # printed once, in the box only
    assert answered
    # Notification links follow its own address; a second shell's manage.py finds what it chose.
    assert f"sidewisp: links point to http://127.0.0.1:{port}; these settings are in " in "\n".join(said)
    chosen = devenv.read(tmp_path / "var" / devenv.FILE_NAME)
    assert chosen["SIDEWISP_BASE_URL"] == f"http://127.0.0.1:{port}"
    assert (chosen["SIDEWISP_QUEUE"], chosen["DEBUG"], chosen["REDIS_URL"]) == (queue, "1", settings.REDIS_URL)
    assert chosen["DATABASE_URL"] == env["DATABASE_URL"]


def test_the_worker_make_run_starts_runs_without_gossip_and_mingle(tmp_path, celery_isolation, transactional_db):
    """Issue 29 §7: Celery's gossip logged AttributeError after each Redis restart; nothing here uses either."""
    import socket as sockets

    from django.conf import settings

    from sidewisp.celery import app
    from sidewisp.ops.devservices import worker_arguments
    from tests.conftest import database_url_for_subprocess

    name = f"devrun{os.getpid()}"
    log = tmp_path / "worker.log"
    command = [sys.executable, "-m", "celery", "-A", "sidewisp", *worker_arguments("1"), "-n", f"{name}@%h"]
    env = {**os.environ, "SIDEWISP_QUEUE": celery_isolation, "DATABASE_URL": database_url_for_subprocess()}
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=settings.BASE_DIR, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        hostname = f"{name}@{sockets.gethostname()}"
        wait_until(lambda: app.control.ping(destination=[hostname], timeout=0.5), what="the worker answers", timeout=90)
        wait_until(lambda: "ready." in log.read_text(), what="the worker says it is ready", timeout=30)
    finally:
        process.terminate()
        process.wait(30)
    text = log.read_text()
    assert "mingle:" not in text  # with mingle, the worker searches for neighbours at start and says so
    assert "--without-gossip" in command and "--without-mingle" in command


# --- issue 32 §5: `make test` stops before running anything when the browser is missing, naming the command ---


def test_make_test_stops_naming_the_install_command_when_chromium_is_missing(tmp_path):
    from sidewisp.ops import devservices

    absent = tmp_path / "chromium"
    said = devservices.missing_for_tests([], chromium=absent)

    assert said is not None
    assert devservices.CHROMIUM_INSTALL in said and "not installed" in said
    assert devservices.missing_for_tests(["tests/e2e", "-x"], chromium=absent) == said
    # Leaving the browser tests out on purpose needs no browser; a browser that is there needs nothing.
    assert devservices.missing_for_tests(["-m", "not e2e"], chromium=absent) is None
    absent.write_text("")
    assert devservices.missing_for_tests([], chromium=absent) is None


def test_the_run_ends_with_how_many_tests_were_skipped_and_why():
    from types import SimpleNamespace

    from tests.conftest import skip_summary

    def skipped(reason: str) -> SimpleNamespace:
        return SimpleNamespace(longrepr=("tests/x.py", 3, f"Skipped: {reason}"))

    assert skip_summary([]) == "sidewisp: 0 tests skipped"
    line = skip_summary([skipped("needs PostgreSQL"), skipped("needs PostgreSQL"), skipped("no spec folder")])
    assert line == "sidewisp: 3 tests skipped: 2 because needs PostgreSQL; 1 because no spec folder"


# --- issue 30 §6: make run's start-up box ----------------------------------------------------------------------


def test_the_start_up_box_shows_the_address_with_the_demo_passwords_and_how_to_print_new_ones():
    output = (
        "demo account created: login operator / password pw-operator-123 (operator, approver)\n"
        "demo account: viewer (exists; password printed when it was created)\n"
    )
    accounts = demo_accounts(output)
    assert accounts == [("operator", "pw-operator-123"), ("viewer", None)]
    box = startup_box("http://127.0.0.1:8000/", accounts).splitlines()
    assert box[0] == box[-1] == "+" + "-" * (len(box[0]) - 2) + "+"
    assert all(line.startswith("| ") and line.endswith(" |") and len(line) == len(box[0]) for line in box[1:-1])
    text = "\n".join(box)
    assert "sidewisp: open http://127.0.0.1:8000/" in text
    assert "login operator  password pw-operator-123" in text
    assert "login viewer    password set earlier; `python manage.py demo_passwords` prints a new one" in text
    assert "python manage.py demo_passwords" in text


def test_the_start_up_box_comes_after_every_process_said_it_is_up(tmp_path, capfd):
    """The box is the last thing of the start-up: printed once /healthz says every process is up, so the
    worker's start-up lines are above it (before, they came after it and scrolled it away)."""
    up = tmp_path / "worker-up"
    worker = f"import time; print('celery@here ready.', flush=True); open({str(up)!r}, 'w').close(); time.sleep(60)"
    children = {"web": [sys.executable, "-c", "import time; time.sleep(60)"], "worker": [sys.executable, "-c", worker]}
    supervisor = Supervisor(children, env={}, cwd=tmp_path)
    answers: list[dict | None] = [None]  # the web server does not answer at first

    def checks(address: str) -> dict | None:
        found = answers[-1]
        answers.append({"database": {"ok": True}, "worker": {"ok": up.exists()}})
        return found

    watch = StartupWatch("http://127.0.0.1:8000/", [("operator", "pw-1")], checks=checks)
    try:
        supervisor.run(until=time.monotonic() + 2, interval=0.05, when_ready=(watch.ready, watch.say))
    finally:
        supervisor.stop()
    out = capfd.readouterr().out
    assert out.count("sidewisp: open http://127.0.0.1:8000/") == 1
    assert out.index("celery@here ready.") < out.index("sidewisp: open")
    assert "login operator  password pw-1" in out
    assert "Not up yet" not in out


def test_a_process_that_never_comes_up_still_gets_the_box_naming_it(capsys):
    now = [0.0]
    down = {"database": {"ok": True}, "worker": {"ok": False}, "beat": {"ok": False}}
    watch = StartupWatch("http://127.0.0.1:8000/", [("viewer", None)], checks=lambda _: down, clock=lambda: now[0])
    assert not watch.ready()
    now[0] = StartupWatch.PATIENCE - 1
    assert not watch.ready()
    now[0] = StartupWatch.PATIENCE
    assert watch.ready()
    watch.say()
    out = capsys.readouterr().out
    assert "Not up yet: beat, worker (the System page says why)" in out
    assert "login viewer  password set earlier; `python manage.py demo_passwords` prints a new one" in out


def test_the_health_checks_are_read_from_healthz_even_when_it_answers_503():
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Down(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"status": "down", "checks": {"redis": {"ok": False}}}).encode()
            self.send_response(503 if self.path == "/healthz" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Down)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert health(f"http://127.0.0.1:{server.server_port}/") == {"redis": {"ok": False}}
    finally:
        server.shutdown()
        server.server_close()
    assert health(f"http://127.0.0.1:{server.server_port}/") is None  # nobody answers


def test_beats_housekeeping_logs_nothing_when_it_goes_well_and_other_tasks_still_do(caplog):
    """The worker ping and heartbeat every 2 s no longer scroll make run's box away; a run's task lines remain."""
    import logging

    from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS

    def task(name: str) -> dict:
        return {"name": name, "id": "t-1", "runtime": 0.01, "return_value": 1}

    caplog.set_level(logging.INFO)
    logging.getLogger("celery.worker.strategy").info(LOG_RECEIVED, task("sidewisp.tasks.record_worker_status"))
    logging.getLogger("celery.app.trace").info(LOG_SUCCESS, task("receipts.tasks.beat_heartbeat"))
    logging.getLogger("celery.beat").info(
        "Scheduler: Sending due task %s (%s)", "worker-status", "sidewisp.tasks.record_worker_status"
    )
    logging.getLogger("celery.app.trace").info(LOG_SUCCESS, task("agents.tasks.start_run"))
    logging.getLogger("celery.app.trace").error("Task %s[%s] raised", "receipts.tasks.beat_heartbeat", "t-2")
    assert [record.getMessage() for record in caplog.records] == [
        "Task agents.tasks.start_run[t-1] succeeded in 0.01s: 1",
        "Task receipts.tasks.beat_heartbeat[t-2] raised",
    ]


@pytest.mark.django_db
def test_healthz_saying_not_yet_is_an_info_line_not_an_error(client, caplog):
    """`make run`'s start-up watch asks /healthz until every process is up: its "not yet" (503) must not greet a
    newcomer with ERROR lines (nor repeat every few seconds as ERROR while a load balancer asks during an outage).
    A 404 elsewhere keeps its WARNING: only the health answer changes level."""
    caplog.set_level(logging.INFO, logger="django.request")

    assert client.get("/healthz").status_code == 503  # no worker or beat in this test: not everything is up
    client.get("/no-such-page/")

    levels = {record.getMessage(): record.levelname for record in caplog.records if record.name == "django.request"}
    assert levels == {"Service Unavailable: /healthz": "INFO", "Not Found: /no-such-page/": "WARNING"}
