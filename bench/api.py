"""How fast receipts arrive from agents that run elsewhere: `POST /api/v1/receipts` beside the local writer.

A daphne server on a throwaway test database (DATABASE_URL's, PostgreSQL for the
figures that count) takes batches of whole healthy handoffs (5 entries each)
from `agents.observe.remote.RemoteSink`, the sink a remote app's writer uses; the same
batches written in this process by `agents.observe.writer.LocalSink` are the reference
(the API also sets each new run's status, which the local observer does
apart). Posting a batch again measures the idempotent path. Prints figures, never pass/fail:

    SECRET_KEY=x DATABASE_URL=postgres://... .venv/bin/python bench/api.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository root is the import root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.environment import ROOT, setup_django, throwaway_database
from bench.sizes import pick
from bench.table import Row, markdown

SECTION = "api"
HANDOFFS_PER_BATCH = 40  # 200 entries, the writer's MAX_BATCH


def rows(quick: bool = False) -> list[Row]:
    """Entries/s and median request time: new batches, repeated batches, and the local writer on the same batches."""
    setup_django()
    batches = pick(quick, tiny=1, quick=3, full=10)
    with throwaway_database():
        from agents.demo.contracts import install_team_contracts
        from receipts.workers import sources

        install_team_contracts()
        token = sources.issue(f"bench-{uuid.uuid4().hex[:6]}")[1]
        with _server() as url:
            return _measure(url, token, batches)


def _measure(url: str, token: str, batches: int) -> list[Row]:
    from agents.observe import remote, writer

    sink = remote.RemoteSink(remote.Client(url=url, token=token, timeout=120.0))
    sent = [_batch() for _ in range(batches)]
    posted = [_timed(sink.write, batch) for batch in sent]
    stored_posted = _stored(sent)
    again = [_timed(sink.write, batch) for batch in sent]
    stored_again = _stored(sent) - stored_posted
    local_batches = [_batch() for _ in range(batches)]
    local = [_timed(writer.LocalSink().write, batch) for batch in local_batches]
    note = f"{batches} batches of {HANDOFFS_PER_BATCH * 5} entries, one sender; stored = receipts counted after"
    return [
        _row("POST /api/v1/receipts, new entries", posted, stored_posted, note),
        _row("POST /api/v1/receipts, the same batch again (idempotent)", again, stored_again, note),
        _row(
            "local writer (LocalSink) on the same kind of batch",
            local,
            _stored(local_batches),
            "in process, no HTTP, no run status (the local observer sets it apart, twice per run); " + note,
        ),
    ]


def _stored(batches: list[list]) -> int:
    """How many receipts of `batches`' handoffs the database holds."""
    from receipts.models import Receipt

    handoff_ids = {entry.handoff_id for batch in batches for entry in batch}
    return Receipt.objects.filter(handoff__handoff_id__in=handoff_ids).count()


def _row(what: str, seconds: list[float], stored: int, note: str) -> Row:
    median = statistics.median(seconds)
    entries = HANDOFFS_PER_BATCH * 5
    figure = (
        f"{stored / sum(seconds):,.0f} receipts/s stored ({stored} of {entries * len(seconds)} entries); "
        f"{entries / median:,.0f} entries/s offered ({median * 1000:,.0f} ms per batch, median)"
    )
    return Row(SECTION, what, figure, note=note)


def _timed(write, batch) -> float:
    start = time.perf_counter()
    write(batch)
    return time.perf_counter() - start


def _batch() -> list:
    from receipts.ingest import intake
    from tests.conftest import handoff_parts

    entries = []
    for _ in range(HANDOFFS_PER_BATCH):
        operation_id, handoff_id = f"op-{uuid.uuid4().hex[:12]}", f"h-{uuid.uuid4().hex[:12]}"
        entries += [intake.PartEntry(operation_id, handoff_id, p, v, "1") for p, v in handoff_parts("healthy")]
    return entries


@contextmanager
def _server() -> Iterator[str]:
    """daphne serving sidewisp.asgi on the throwaway database, on a free port; yields its URL."""
    from sidewisp.ops.devservices import _free_port
    from tests.conftest import database_url_for_subprocess

    port = _free_port()
    env = {**os.environ, "DATABASE_URL": database_url_for_subprocess(), "SIDEWISP_API_RATE_LIMIT": "1000000"}
    daphne = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "sidewisp.asgi:application"]
    process = subprocess.Popen(daphne, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_for(url)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"{url}/login/", timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)  # polling for the port to open
    raise RuntimeError("daphne did not answer within 30 s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    print(markdown(rows(parser.parse_args().quick)))
