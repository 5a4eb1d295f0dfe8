"""The overview's hourly rollup: kept by the database's own triggers, so it never shows a false green.

A handoff counted healthy in its hour and found false-complete later is counted false-complete in that
hour at once, on the page, whichever way the verdict was written (a model save, a bulk UPDATE), before and
after the deltas are compacted; and a long window's counts always equal a live count of the handoffs.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from django.db.models import Count
from django.urls import reverse
from django.utils import timezone

from receipts.models import Handoff, Run, VerdictBucket
from receipts.queries import dashboard, rollups

pytestmark = pytest.mark.django_db
VERDICTS = ("HEALTHY", "FALSE_COMPLETE", "UNCERTAIN", "ROUTE_REJECTED", "WAITING_ON_APPROVAL")


def _handoff(n: int, verdict: str, created_at) -> Handoff:
    run = Run.objects.create(operation_id=f"op-{n}", thread_id=f"th-{n}")
    return Handoff.objects.create(handoff_id=f"h-{n}", run=run, verdict=verdict, created_at=created_at)


def _overview(client, window: str) -> tuple[dict, dashboard.WindowStats]:
    context = client.get(reverse("sidewisp:overview"), {"window": window}).context
    return dict(context["counts"]), context["stats"]


def test_a_verdict_that_turns_bad_after_its_hour_was_counted_is_counted_bad_on_the_overview(viewer_client):
    saved = _handoff(1, "HEALTHY", timezone.now() - timedelta(hours=3))
    bulk = _handoff(2, "HEALTHY", timezone.now() - timedelta(days=3))
    rollups.compact()
    counts, stats = _overview(viewer_client, "7d")
    assert (counts["HEALTHY"], counts["FALSE_COMPLETE"], stats.problem_handoffs) == (2, 0, 0)

    saved.verdict = "FALSE_COMPLETE"
    saved.save()  # the ORM's way
    Handoff.objects.filter(pk=bulk.pk).update(verdict="ROUTE_REJECTED")  # a bulk UPDATE's way

    for _ in ("deltas", "compacted"):
        counts, stats = _overview(viewer_client, "7d")
        assert (counts["HEALTHY"], counts["FALSE_COMPLETE"], counts["ROUTE_REJECTED"]) == (0, 1, 1)
        assert (stats.handoffs, stats.problem_handoffs, sum(stats.problem_trend)) == (2, 2, 2)
        day, _ = _overview(viewer_client, "24h")
        assert (day["FALSE_COMPLETE"], day["ROUTE_REJECTED"], day["HEALTHY"]) == (1, 0, 0)
        rollups.compact()


def test_a_handoff_moved_to_another_hour_leaves_its_old_hour():
    handoff = _handoff(1, "UNCERTAIN", timezone.now() - timedelta(days=2))
    Handoff.objects.filter(pk=handoff.pk).update(created_at=timezone.now() - timedelta(hours=2))
    since = timezone.now() - timedelta(hours=24)

    assert rollups.window_counts(since, [since]).by_verdict == {"UNCERTAIN": 1}


def test_long_windows_count_exactly_what_a_live_count_of_the_handoffs_finds():
    rng = random.Random(7)
    now = timezone.now()
    handoffs = [
        _handoff(n, rng.choice(VERDICTS), now - timedelta(minutes=rng.randrange(9 * 24 * 60))) for n in range(80)
    ]
    for handoff in rng.sample(handoffs, 30):
        handoff.verdict = rng.choice(VERDICTS)
        handoff.save(update_fields=["verdict"])
    rollups.compact()
    for handoff in rng.sample(handoffs, 10):  # deltas after the compaction, too
        Handoff.objects.filter(pk=handoff.pk).update(verdict=rng.choice(VERDICTS))

    for hours in (12, 24, 24 * 7):
        since = now - timedelta(hours=hours, minutes=rng.randrange(60))
        edges = rollups.trend_edges(since, now, dashboard.SPARK_BUCKETS)
        counted = rollups.window_counts(since, edges)
        window = Handoff.objects.filter(created_at__gte=since).order_by()
        assert counted.by_verdict == dict(window.values_list("verdict").annotate(n=Count("pk")))
        for i, bucket in enumerate(counted.by_bucket):
            inside = window.filter(created_at__gte=edges[i])
            if i + 1 < len(edges):
                inside = inside.filter(created_at__lt=edges[i + 1])
            assert bucket == dict(inside.values_list("verdict").annotate(n=Count("pk"))), (hours, i)


def test_a_deleted_handoff_leaves_its_hour():
    kept, gone = (
        _handoff(1, "HEALTHY", timezone.now() - timedelta(hours=5)),
        _handoff(2, "FALSE_COMPLETE", timezone.now()),
    )
    Handoff.objects.filter(pk=gone.pk).delete()  # as retention deletes (runs stay: PROTECT is the other way)
    since = timezone.now() - timedelta(hours=24)

    assert rollups.window_counts(since, [since]).by_verdict == {"HEALTHY": 1}
    assert kept.pk and rollups.compact() == 1


def test_compaction_leaves_one_row_per_hour_and_verdict_and_drops_the_zeros():
    at = timezone.now().replace(minute=30) - timedelta(hours=5)
    first, second = _handoff(1, "HEALTHY", at), _handoff(2, "HEALTHY", at)
    for verdict in ("UNCERTAIN", "FALSE_COMPLETE", "HEALTHY"):
        Handoff.objects.filter(pk=first.pk).update(verdict=verdict)
    Handoff.objects.filter(pk=second.pk).update(verdict="UNCERTAIN")
    assert VerdictBucket.objects.count() == 2 + 8

    assert rollups.compact() == 2
    assert sorted(VerdictBucket.objects.values_list("verdict", "n")) == [("HEALTHY", 1), ("UNCERTAIN", 1)]


def test_rebuild_counts_every_handoff_afresh():
    _handoff(1, "HEALTHY", timezone.now() - timedelta(hours=30))
    VerdictBucket.objects.all().delete()  # as after a load that bypassed the triggers

    rollups.rebuild()

    assert list(VerdictBucket.objects.values_list("verdict", "n")) == [("HEALTHY", 1)]


def test_beat_compacts_the_rollup_every_minute(settings):
    from sidewisp import tasks

    entry = settings.CELERY_BEAT_SCHEDULE["compact-rollups"]
    _handoff(1, "HEALTHY", timezone.now())
    Handoff.objects.update(verdict="UNCERTAIN")

    assert (entry["task"], entry["schedule"]) == ("sidewisp.tasks.compact_rollups", 60.0)
    assert tasks.compact_rollups() == 1
