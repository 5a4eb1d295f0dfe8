"""Classify a JSON Lines file of handoff bundles (spec §4)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from receipts import verdicts
from receipts.ingest import jsonfiles
from receipts.verdicts import bundle


class Command(BaseCommand):
    help = "Classify each sidewisp.handoff/1 bundle in CASES.jsonl against CONTRACTS.json."

    def add_arguments(self, parser):
        parser.add_argument("cases", type=Path)
        parser.add_argument("--contracts", type=Path, required=True)
        parser.add_argument("--now", help="classification time, ISO 8601 with a zone (default: now)")

    def handle(self, *args, cases: Path, contracts: Path, now: str | None, **options):
        moment = _parse_now(now)
        rules = _read_contracts(contracts)
        # Read everything first: unreadable input prints no partial results.
        bundles = list(_read_bundles(cases))
        total = matched = missed = 0
        for bundle_ in bundles:
            result = verdicts.classify(bundle_, rules, moment)
            total += 1
            if bundle_.expect is not None:
                if result.verdict == bundle_.expect:
                    matched += 1
                else:
                    missed += 1
            row = {
                "handoff_id": bundle_.handoff_id,
                "verdict": result.verdict,
                "boundary": result.boundary,
                "next_move": result.next_move,
                "expected": bundle_.expect,
            }
            self.stdout.write(json.dumps(row))
        self.stdout.write(f"{total} cases, {matched} as expected, {missed} not")
        if missed:
            raise SystemExit(1)


def _parse_now(raw: str | None) -> datetime:
    if raw is None:
        return datetime.now(UTC)
    try:
        return bundle.parse_time("--now", raw)
    except bundle.BundleError as exc:
        raise CommandError(str(exc), returncode=2) from None


def _read_contracts(path: Path) -> bundle.Contracts:
    document = jsonfiles.read_document(path)
    try:
        return bundle.parse_contracts(document)
    except bundle.BundleError as exc:
        raise CommandError(f"{path.name}: {exc}", returncode=2) from None


def _read_bundles(path: Path):
    for line_no, value in jsonfiles.read_lines(path):
        try:
            yield bundle.parse_bundle(value)
        except bundle.BundleError as exc:
            raise CommandError(f"{path.name}:{line_no}: {exc}", returncode=2) from None
