"""Load a spec §2 contracts document into the database."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from receipts import bundle, jsonfiles
from receipts.contracts import ContractConflict, import_document


class Command(BaseCommand):
    help = "Import route/context contracts and wait reasons from a JSON document (spec §2)."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)

    def handle(self, *args, path: Path, **options):
        document = jsonfiles.read_document(path)
        try:
            result = import_document(document)
        except (bundle.BundleError, ContractConflict) as exc:
            raise CommandError(f"{path.name}: {exc}", returncode=2) from None
        self.stdout.write(
            f"added {len(result.added)}, updated {len(result.updated)}, unchanged {len(result.unchanged)} "
            f"versions; {len(result.wait_reasons)} wait reasons"
        )
