"""A hosted graph's own route contract, added to the database before its runs (issue 28 §8).

A graph names the spec §2 document it follows in its SIDEWISP_GRAPHS entry (`contracts`) or
as its module's `sidewisp_contracts` (agents.host.entries). Starting a run of it adds what the
document adds (receipts.ingest.contracts.add_document): new versions and wait reasons. The
same content again changes nothing; other content under a stored version is refused in words,
because versions are never edited.
"""

from __future__ import annotations

import logging

from agents.host import registry
from receipts.ingest.contracts import ContractConflict, ImportResult, add_document
from receipts.verdicts.bundle import BundleError

logger = logging.getLogger(__name__)


def ensure(graph: str) -> ImportResult | None:
    """Add the contract `graph` ships, if any; raises ContractConflict (a ValueError) naming the version."""
    entry = registry.graphs().get(graph)
    if entry is None or entry.contracts is None:
        return None
    return add_document(entry.contracts, source=f"graph {graph} ({entry.contracts_from})")


def ensure_quietly(graph: str) -> None:
    """`ensure` for a worker about to run `graph`: a refusal is logged, and the run is judged by what is stored."""
    try:
        ensure(graph)
    except (ContractConflict, BundleError) as exc:
        logger.warning("the contract graph %s ships was not imported: %s", graph, exc)
