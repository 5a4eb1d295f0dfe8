"""Print this database's deployment id (receipts.workers.deployment); `--queue`: `make run`'s default queue for it."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from receipts.workers import deployment


class Command(BaseCommand):
    help = "Print the deployment id this database holds (made at the first migration)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--queue", action="store_true", help="Print the default queue name derived from it.")

    def handle(self, *args, **options) -> None:
        key = deployment.current_id()
        self.stdout.write(deployment.default_queue(key) if options["queue"] else key)
