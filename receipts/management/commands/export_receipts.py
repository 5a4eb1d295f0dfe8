"""Print stored handoffs as sidewisp.handoff/1 bundles, one JSON object per line."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand

from receipts.models import Handoff
from receipts.verdicts import bundle


class Command(BaseCommand):
    help = "Export handoffs as JSON Lines bundles that replay_receipts can read."

    def add_arguments(self, parser):
        parser.add_argument("--operation", help="only the handoffs of this operation id")

    def handle(self, *args, operation: str | None, **options):
        handoffs = Handoff.objects.select_related("run").order_by("pk")
        if operation:
            handoffs = handoffs.filter(run__operation_id=operation)
        for handoff in handoffs.iterator(chunk_size=500):
            self.stdout.write(json.dumps(bundle.bundle_to_dict(handoff.to_bundle())))
