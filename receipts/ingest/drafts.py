"""Declare what you saw: a draft contract version built from handoffs rejected at the route boundary.

A handoff is ROUTE_REJECTED when its `route_version` is not a stored version, or names one that does
not declare its sender → receiver. Nothing turns green by itself (fail closed): an admin reads a draft
built from what the handoffs showed (senders, receivers, the context keys they carried) beside the
stored version, and declares it (receipts.actions.declare). Versions are never edited, so a route
missing from a stored version is drafted as a new version that adds it to that version's routes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass

from receipts.ingest import contracts
from receipts.models import ContractVersion, Handoff

# How many rejected handoffs one draft reads (the newest): enough to see every route a team uses.
MAX_HANDOFFS = 500


@dataclass(frozen=True)
class SeenRoute:
    """One sender → receiver the handoffs took, what its draft requires and which context keys were seen."""

    sender: str
    receiver: str
    required: tuple[str, ...]  # keys the sender said it hands over that were seen after the update
    seen: tuple[str, ...]  # every context key seen after the update (the reviewer's evidence)
    handoffs: int


@dataclass(frozen=True)
class Draft:
    version: str  # the version declaring it would store
    named: str  # the version the handoffs named
    based_on: str  # the stored version it starts from ("" when the named version is unknown)
    routes: dict
    seen: tuple[SeenRoute, ...]
    changes: tuple[contracts.RouteChange, ...]
    diff: tuple[str, ...]
    handoff_pks: tuple[int, ...]

    @property
    def digest(self) -> str:
        """What the page showed: a declaration is refused when the draft has changed since."""
        text = json.dumps({"version": self.version, "routes": self.routes}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def follows_on_its_own(self) -> bool:
        """True when the senders already name `version`: their next handoffs are judged by it."""
        return self.version == self.named


def rejected_handoffs(handoffs) -> list[Handoff]:
    """The newest ROUTE_REJECTED handoffs of a queryset (at most MAX_HANDOFFS)."""
    found = handoffs.filter(verdict="ROUTE_REJECTED").order_by("-created_at", "-pk")
    return list(found.only("pk", "sender", "receiver", "route_version", "created_part", "reduced_part")[:MAX_HANDOFFS])


def drafts_for(handoffs: Iterable[Handoff]) -> list[Draft]:
    """One draft per route version that the rejected `handoffs` name without it declaring their route."""
    stored = {cv.version: cv for cv in ContractVersion.objects.all()}
    by_version: dict[str, dict[tuple[str, str], list[Handoff]]] = {}
    for h in handoffs:
        created = h.created_part or {}
        sender, receiver, version = created.get("sender"), created.get("receiver"), created.get("route_version")
        if not (sender and receiver and version):
            continue  # nothing to declare: the receipt itself is missing a name
        current = stored.get(version)
        if current is not None and receiver in (current.routes.get(sender) or {}):
            continue  # declared: it was rejected for another reason (goto differs from receiver)
        by_version.setdefault(version, {}).setdefault((sender, receiver), []).append(h)
    found = [_draft(version, routes, stored) for version, routes in sorted(by_version.items())]
    # A new version already declaring exactly these routes is declared: its senders only have to name it.
    declared = [cv.routes for cv in stored.values()]
    return [draft for draft in found if draft.routes not in declared]


def _draft(named: str, observed: dict[tuple[str, str], list[Handoff]], stored: dict) -> Draft:
    base = stored.get(named)
    before = base.routes if base is not None else {}
    routes = {sender: dict(receivers) for sender, receivers in before.items()}
    seen = []
    for (sender, receiver), handoffs in sorted(observed.items()):
        keys_seen = sorted({k for h in handoffs for k in (h.reduced_part or {}).get("context_keys") or ()})
        declared = {k for h in handoffs for k in (h.created_part or {}).get("required_context_keys") or ()}
        required = tuple(k for k in keys_seen if k in declared)
        routes.setdefault(sender, {})[receiver] = list(required)
        seen.append(SeenRoute(sender, receiver, required, tuple(keys_seen), len(handoffs)))
    version = named if base is None else contracts.suggest_version_name(named)
    names = (named if base is not None else "nothing stored", version)
    return Draft(
        version=version,
        named=named,
        based_on=base.version if base is not None else "",
        routes=routes,
        seen=tuple(seen),
        changes=tuple(contracts.route_changes(before, routes)),
        diff=tuple(contracts.diff_lines(before or None, routes, names=names)),
        handoff_pks=tuple(sorted(h.pk for hs in observed.values() for h in hs)),
    )
