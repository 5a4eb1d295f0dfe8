"""The team's route and context contracts (agents/contracts.json, a copy of the team's spec cases)."""

from __future__ import annotations

import json
from pathlib import Path

from receipts.ingest.contracts import ImportResult, import_document

CONTRACTS_FILE = Path(__file__).resolve().parent.parent / "contracts.json"  # where migrations 0002/0005 read it


def team_contracts() -> dict:
    return json.loads(CONTRACTS_FILE.read_text())


def install_team_contracts() -> ImportResult:
    """Store the team's contracts (new versions added, referenced ones never changed)."""
    return import_document(team_contracts())
