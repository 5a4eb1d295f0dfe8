"""`manage.py prune_retention`: prune now what the retention policy no longer keeps (beat does it every hour)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from receipts import retention


class Command(BaseCommand):
    help = "Prune what the retention policy no longer keeps, in bounded batches; the counts go to the audit log."

    def handle(self, *args, **options) -> None:
        last = retention.prune()
        for count, what in last.lines() or [(0, "rows: nothing was due")]:
            self.stdout.write(f"{count} {what}")
        self.stdout.write(f"in {last.seconds:.1f} s, {last.partitions_dropped} receipt months dropped whole")
        if last.error:
            self.stderr.write(f"stopped early ({last.error}); the next run continues")
