"""Fault fixtures: a private Redis of the test's own that it can kill and start again on the same port.

The shared Redis (REDIS_URL, usually 127.0.0.1:6379) is never touched: a fault test points the Celery app
and its worker processes at its private server instead (`point_celery_at` in tests/conftest.py).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from sidewisp.ops.devservices import _free_port, _redis_server_binary


@dataclass
class PrivateRedis:
    """A redis-server this test started, on its own port; `kill()` crashes it, `start()` brings it back there.

    Append-only persistence with fsync on every write, as a production broker should run: a message Redis
    accepted before a crash is still there after the restart.
    """

    port: int
    data_dir: Path
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def answers(self) -> bool:
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def start(self, *, timeout: float = 15.0) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        command = [
            _redis_server_binary(),
            *("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data_dir)),
            *("--save", "", "--appendonly", "yes", "--appendfsync", "always"),
            *("--maxmemory-policy", "noeviction", "--daemonize", "no"),
        ]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"the private redis-server on port {self.port} did not start")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL (a crash: no shutdown save), by the process id this fixture started."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(port=_free_port(), data_dir=tmp_path / "redis")
    server.data_dir.mkdir()
    server.start()
    try:
        yield server
    finally:
        server.kill()
