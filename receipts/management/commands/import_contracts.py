"""Load a spec §2 contracts document into the database."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from receipts.ingest import jsonfiles
from receipts.ingest.contracts import ContractConflict, add_document, import_document
from receipts.verdicts import bundle

# A file written before wait reasons were part of the contracts (or by hand) lacks the key; say what it needs.
MISSING_WAIT_REASONS = (
    'the key "wait_reasons" is missing. A contracts file lists the wait reason codes its waits and approval rules '
    'may use, beside "routes", e.g. {"wait_reasons": ["purchase_approval"], "routes": {...}}; '
    'write "wait_reasons": [] when the team has none.'
)


class Command(BaseCommand):
    help = "Import route/context contracts and wait reasons from a JSON document (spec §2)."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)
        parser.add_argument(
            "--add",
            action="store_true",
            help="only add: new versions and wait reasons; keep every stored wait reason; "
            "a stored version with other content is refused",
        )

    def handle(self, *args, path: Path, add: bool = False, **options):
        document = jsonfiles.read_document(path)
        if isinstance(document, dict) and "wait_reasons" not in document:
            raise CommandError(f"{path.name}: {MISSING_WAIT_REASONS}", returncode=2)
        try:
            result = add_document(document, source=path.name) if add else import_document(document)
        except (bundle.BundleError, ContractConflict) as exc:
            raise CommandError(f"{path.name}: {exc}", returncode=2) from None
        self.stdout.write(
            f"added {len(result.added)}, updated {len(result.updated)}, unchanged {len(result.unchanged)} "
            f"versions; {len(result.wait_reasons)} wait reasons"
        )
