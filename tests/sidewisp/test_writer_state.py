"""Issue 32 §1: each process's evidence writer (queued, stored, dropped) on the System page."""

from __future__ import annotations

import re

import pytest
import redis
from django.urls import reverse

from agents.observe import writer
from sidewisp.ops import writers

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_keys(settings, celery_isolation):
    settings.CELERY_TASK_DEFAULT_QUEUE = celery_isolation  # this test run's own Redis keys
    url = settings.REDIS_URL  # a test may point the setting elsewhere
    yield
    with redis.Redis.from_url(url) as client:
        client.delete(writers.processes_key(), *[writers.writer_count_key(name) for name in writers.WRITER_COUNTS])


def system_fragment(client) -> str:
    return client.get(reverse("sidewisp:system"), headers={"HX-Request": "true"}).content.decode()


def test_the_system_page_shows_each_processs_queued_stored_and_dropped_entries(viewer_client, monkeypatch):
    counts = {"submitted": 12, "written": 9, "batches": 3, "blocked": 2, "dropped": 2, "failed": 0, "queued": 1}
    monkeypatch.setattr(writer, "stats", lambda: dict(counts))
    monkeypatch.setattr(writers, "_pushed_writer_counts", {})
    writers.push_writer_counts()  # a task ended in this process (Celery's task_postrun)
    counts.update(written=10, queued=0)

    fragment = system_fragment(viewer_client)

    assert 'id="system-writers"' in fragment
    row = fragment[fragment.index(f"<code>{writers.process_label()}</code>") :].split("</tr>")[0]
    cells = [re.sub(r"<[^>]+>", "", cell).strip() for cell in row.split("</td>")[1:4]]
    assert cells == ["0", "10", "✖ 2"]  # queued, stored (read live in the process that serves the page), dropped


def test_the_system_page_says_when_no_process_has_recorded_evidence(viewer_client, monkeypatch):
    monkeypatch.setattr(writer, "stats", lambda: dict.fromkeys(writer.Stats.__annotations__, 0))

    assert "No process has recorded evidence in the last hour." in system_fragment(viewer_client)


def test_the_system_page_says_when_redis_cannot_tell(viewer_client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there

    assert "Not known: Redis did not answer." in system_fragment(viewer_client)
