"""The overview's rollups: per-hour verdict counts kept by database triggers (receipts.queries.rollups)."""

from __future__ import annotations

from django.db import models

# --- issue 20 §4: the overview's rollups (receipts.queries.rollups; migration 0021 adds the triggers that keep them)


class VerdictBucket(models.Model):
    """A change in how many handoffs created in an hour (UTC) have a verdict now: +1 or -1, or a compacted sum.

    Written only by the database: triggers on the handoff table append a +1 when a handoff is inserted, a
    -1 / +1 pair when its verdict (or creation time) changes and a -1 when it is deleted, so every write
    path, ORM or bulk SQL, keeps it exact; `receipts.queries.rollups.compact` folds the deltas into one row per hour,
    verdict and owner key. The sum over an hour's rows is that hour's count by current verdict.

    Each row is also keyed by its handoffs' run's `graph` and `source_name` (migration 0027), what a run's team is
    decided by, so a team's scope filters the rollup at read time (`receipts.org.teams.owns_q`) as it filters runs:
    a graph or source that changes hands moves its counts with it, and no team's count is kept here.
    """

    bucket = models.DateTimeField()
    verdict = models.CharField(max_length=40)
    graph = models.CharField(max_length=100, blank=True, db_default="")  # the run's
    source_name = models.CharField(max_length=100, blank=True, db_default="")  # the run's
    n = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["bucket", "verdict", "graph", "source_name", "n"], name="verdict_bucket_owner")]

    def __str__(self) -> str:
        return f"{self.bucket:%Y-%m-%d %H}h {self.verdict} {self.n:+d}"


# --- end issue 20 §4
