"""Print the stored contracts as the spec §2 JSON document."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from receipts.ingest.contracts import export_document


class Command(BaseCommand):
    help = "Export route/context contracts and wait reasons as JSON (spec §2)."

    def handle(self, *args, **options):
        self.stdout.write(json.dumps(export_document(), indent=2, sort_keys=True))
