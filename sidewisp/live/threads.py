"""The live pages' render threads: their database work beside, not on, Django's thread-sensitive thread."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Iterator

from django.db import close_old_connections, connection, connections, transaction

# A render thread idle this long closes its database connection.
IDLE_CLOSE_SECONDS = 1.0
RENDER_THREADS = 4


async def on_render_thread(function, *args):
    """`function(*args)` on the live pages' threads (`RenderThreads`), each with a database connection of its own."""
    return await asyncio.wrap_future(render_threads.submit(function, *args))


class RenderThreads:
    """The live pages' database work (renders, markers, user checks): beside, not on, the thread-sensitive
    thread that Django's sync code shares.

    Each thread keeps its database connection while work keeps coming (a new connection per render was a
    PostgreSQL backend started and torn down many times a second) and closes it once idle for
    IDLE_CLOSE_SECONDS, so no connection outlives the pages that needed it.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def submit(self, function, *args) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.jobs.put((future, function, args))
        with self.lock:
            if len(self.threads) < self.size:
                name = f"sidewisp-live-{len(self.threads)}"
                thread = threading.Thread(target=self._work, name=name, daemon=True)
                self.threads.append(thread)
                thread.start()
        return future

    def _work(self) -> None:
        while True:
            try:
                future, function, args = self.jobs.get(timeout=IDLE_CLOSE_SECONDS)
            except queue.Empty:
                connections.close_all()
                future, function, args = self.jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                close_old_connections()  # one that failed or is too old (CONN_MAX_AGE) is not used again
                future.set_result(function(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine, which decides; the
                # thread lives on (a thread that died here left its page's render awaited for ever)
                future.set_exception(exc)
            finally:
                del future, function, args


render_threads = RenderThreads(RENDER_THREADS)


@contextlib.contextmanager
def one_snapshot() -> Iterator[None]:
    """Every query inside reads the database as of one moment: a render is many queries, and under read committed
    each saw its own. The waits page counts its open waits and then reads the page of them, sliced to that count
    (Django's Paginator): a wait committed between the two took the last row's place in that render, and the next
    render put that row back as a new element. PostgreSQL: a read-only REPEATABLE READ transaction. Inside a
    transaction already, or on SQLite (whose transactions here take the write lock up front), as before.
    """
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield
