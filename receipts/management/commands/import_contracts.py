"""Load a spec §2 contracts document into the database."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from receipts import bundle
from receipts.contracts import ContractConflict, import_document


class Command(BaseCommand):
    help = "Import route/context contracts and wait reasons from a JSON document (spec §2)."

    def add_arguments(self, parser):
        parser.add_argument("path", type=Path)

    def handle(self, *args, path: Path, **options):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise CommandError(f"{path.name}: cannot read ({exc.strerror})", returncode=2) from None
        except json.JSONDecodeError as exc:
            raise CommandError(f"{path.name}: not valid JSON ({exc.msg})", returncode=2) from None
        try:
            result = import_document(document)
        except (bundle.BundleError, ContractConflict) as exc:
            raise CommandError(f"{path.name}: {exc}", returncode=2) from None
        self.stdout.write(
            f"added {len(result.added)}, updated {len(result.updated)}, unchanged {len(result.unchanged)} "
            f"versions; {len(result.wait_reasons)} wait reasons"
        )
