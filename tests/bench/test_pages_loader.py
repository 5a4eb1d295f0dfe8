"""bench.loader and bench.pages at a tiny size: the loader fills a fresh database from the models, and the
pages benchmark measures every page on it (figures printed, never judged)."""

from __future__ import annotations

import pytest

from bench import loader, pages
from receipts.models import AuditEntry, Handoff, Receipt, Run, VerdictBucket

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_loader_fills_a_fresh_database_with_the_realistic_mix(roles):
    loaded = loader.load(handoffs=200)

    assert (loaded.handoffs, loaded.receipts) == (200, 2000) == (Handoff.objects.count(), Receipt.objects.count())
    assert Run.objects.count() == loaded.runs and not Run.objects.exclude(source_name="").exists()
    assert Handoff.objects.filter(verdict="HEALTHY").count() > 100 and Handoff.objects.filter(wait_open=True).exists()
    assert AuditEntry.objects.exists()
    assert sum(VerdictBucket.objects.values_list("n", flat=True)) == 200  # the overview's rollup, rebuilt


def test_the_loader_names_a_required_column_it_does_not_fill_before_writing_anything():
    with pytest.raises(loader.SchemaMismatch, match=r"receipts\.Receipt\.handoff is required"):
        loader._table(Receipt, ("id", "part", "attempt", "payload", "recorded_at"))
    with pytest.raises(loader.SchemaMismatch, match="has no column gone any more"):
        loader._table(Receipt, ("id", "gone"))


def test_the_pages_benchmark_measures_every_page_at_a_tiny_size(roles):
    rows = pages.rows(True, handoffs=200, requests=1)

    assert len(rows) == len(pages._urls()) == 22  # 20 pages and /healthz read two ways
    assert all(row.section == "pages" and " queries, " in row.figure and "load average" in row.note for row in rows)
    assert "#### overview (7d)" in pages.explain(True, handoffs=200, requests=1)
