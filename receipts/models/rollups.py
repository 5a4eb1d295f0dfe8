"""The overview's rollups: per-hour verdict counts kept by database triggers (receipts.queries.rollups)."""

from __future__ import annotations

from django.db import models

# --- issue 20 §4: the overview's rollups (receipts.queries.rollups; migration 0021 adds the triggers that keep them)


class VerdictBucket(models.Model):
    """A change in how many handoffs created in an hour (UTC) have a verdict now: +1 or -1, or a compacted sum.

    Written only by the database: triggers on the handoff table append a +1 when a handoff is inserted, a
    -1 / +1 pair when its verdict (or creation time) changes and a -1 when it is deleted, so every write
    path, ORM or bulk SQL, keeps it exact; `receipts.queries.rollups.compact` folds the deltas into one row per hour
    and verdict. The sum over an hour's rows is that hour's count by current verdict.
    """

    bucket = models.DateTimeField()
    verdict = models.CharField(max_length=40)
    n = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["bucket", "verdict", "n"], name="verdict_bucket_time")]

    def __str__(self) -> str:
        return f"{self.bucket:%Y-%m-%d %H}h {self.verdict} {self.n:+d}"


# --- end issue 20 §4
