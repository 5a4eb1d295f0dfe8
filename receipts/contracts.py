"""Contracts in the database, as the pure classifier's `Contracts` value.

Versions are kept, never edited in place once a handoff references them: an old
sender must not look healthy against rules that were changed under it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from receipts import bundle
from receipts.models import ContractVersion, WaitReason


class ContractConflict(ValueError):
    """An import tried to change a version that handoffs already reference."""


def current_contracts() -> bundle.Contracts:
    return bundle.parse_contracts(export_document())


def export_document() -> dict:
    """The spec §2 document for every stored version and wait reason."""
    return {
        "wait_reasons": list(WaitReason.objects.values_list("code", flat=True)),
        "routes": {cv.version: cv.routes for cv in ContractVersion.objects.all()},
    }


@dataclass(frozen=True)
class ImportResult:
    added: tuple[str, ...]
    updated: tuple[str, ...]
    unchanged: tuple[str, ...]
    wait_reasons: tuple[str, ...]


@transaction.atomic
def import_document(document: object) -> ImportResult:
    """Store a spec §2 document: new versions are added, referenced ones never change.

    The wait-reason codes become exactly the document's list. Raises
    `bundle.BundleError` on an invalid document and `ContractConflict` when a
    referenced version would change; either way nothing is written.
    """
    contracts = bundle.parse_contracts(document)
    wanted = bundle.contracts_to_dict(contracts)
    existing = {cv.version: cv for cv in ContractVersion.objects.select_for_update()}
    added, updated, unchanged = [], [], []
    for version, routes in wanted["routes"].items():
        current = existing.get(version)
        if current is None:
            ContractVersion.objects.create(version=version, routes=routes)
            added.append(version)
        elif _normalized(current.routes) == _normalized(routes):
            unchanged.append(version)
        elif current.is_referenced():
            msg = f"routes.{version}: is referenced by handoffs and cannot change; import it under a new version name"
            raise ContractConflict(msg)
        else:
            current.routes = routes
            current.save(update_fields=["routes"])
            updated.append(version)
    codes = sorted(contracts.wait_reasons)
    WaitReason.objects.exclude(code__in=codes).delete()
    for code in codes:
        WaitReason.objects.get_or_create(code=code)
    return ImportResult(tuple(added), tuple(updated), tuple(unchanged), tuple(codes))


def _normalized(routes: object) -> dict:
    return bundle.contracts_to_dict(bundle.parse_contracts({"wait_reasons": [], "routes": {"v": routes}}))["routes"][
        "v"
    ]
