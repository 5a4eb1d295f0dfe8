"""Contracts in the database, as the pure classifier's `Contracts` value.

Versions are kept, never edited in place once a handoff references them: an old
sender must not look healthy against rules that were changed under it.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models.signals import post_delete, post_save

from receipts.models import AlertRule, AuditEntry, ContractVersion, WaitReason
from receipts.org import audit
from receipts.queries import prepared
from receipts.verdicts import bundle


class ContractConflict(ValueError):
    """An import tried to change a version that handoffs already reference."""


def current_contracts() -> bundle.Contracts:
    """Every stored version and wait reason, parsed once per change (cached by `_fingerprint`).

    One small query checks the cache, so a version an admin adds in the web
    process is seen by the next receipt a worker records; this process's own
    saves and deletes drop the cache at once.
    """
    return contracts_of(_fingerprint())


def current_contracts_sent() -> Callable[[], tuple[bundle.Contracts, list[tuple]]]:
    """`current_contracts`, its check sent now: a function giving the contracts once its answer is read (after
    the statements sent with it, `sqlsets.together`: reading it inside would wait for its answer alone). PostgreSQL
    only: prepared once per connection (`receipts.queries.prepared`), as the writer's batches send it each.

    The same statement reads the active verdict alert rules, given with the contracts as (pk, verdict, agent,
    team pk or None)s: a batch matches its changes against them (`batches.Batch.verdict_rules`,
    `receipts.notify.alerts.verdict_rules`), read with its first statements instead of a cache's version asked
    once per batch (issue 32 §2).
    """
    cursor = prepared.cursor()
    cursor.execute(f"{_fingerprint_sql()}, ({_verdict_rules_sql()})")

    def found() -> tuple[bundle.Contracts, list[tuple]]:
        with cursor:
            *key, rules = cursor.fetchone()
        rules = json.loads(rules) if isinstance(rules, str) else rules
        return contracts_of(tuple(key)), [tuple(rule) for rule in rules or ()]

    return found


def contracts_of(key: tuple) -> bundle.Contracts:
    """The contracts whose `_fingerprint` is `key`: cached, else read."""
    global _cached
    cached = _cached
    if cached is not None and cached[0] == key:
        return cached[1]
    found = bundle.parse_contracts(export_document())
    _cached = (key, found)
    return found


# (fingerprint, contracts) of the last read; replaced whole, so threads never see half of it.
_cached: tuple[tuple, bundle.Contracts] | None = None


def _fingerprint() -> tuple:
    """How many versions and wait reasons there are, the newest of each (one query)."""
    with connection.cursor() as cursor:
        cursor.execute(_fingerprint_sql())
        return tuple(cursor.fetchone())


def _fingerprint_sql() -> str:
    versions = connection.ops.quote_name(ContractVersion._meta.db_table)
    reasons = connection.ops.quote_name(WaitReason._meta.db_table)
    return (
        f"SELECT (SELECT COUNT(*) FROM {versions}), (SELECT MAX(id) FROM {versions}), "
        f"(SELECT MAX(created_at) FROM {versions}), "
        f"(SELECT COUNT(*) FROM {reasons}), (SELECT MAX(id) FROM {reasons})"
    )


def _verdict_rules_sql() -> str:
    """The active verdict rules as one JSON array of [pk, verdict, agent, team pk or null], by pk (NULL for none):
    what `receipts.notify.alerts.verdict_rules` reads."""
    rules, quoted = AlertRule._meta, connection.ops.quote_name
    columns = ", ".join(quoted(rules.get_field(name).column) for name in ("id", "verdict", "agent", "team"))
    active, kind = (quoted(rules.get_field(name).column) for name in ("active", "kind"))
    assert AlertRule.Kind.VERDICT.value.isidentifier()  # written into the statement as it is
    return (
        f"SELECT json_agg(json_build_array({columns}) ORDER BY {quoted(rules.pk.column)}) FROM {quoted(rules.db_table)}"
        f" WHERE {active} AND {kind} = '{AlertRule.Kind.VERDICT.value}'"
    )


def _forget_cached(**_: object) -> None:
    global _cached
    _cached = None


for _model in (ContractVersion, WaitReason):
    post_save.connect(_forget_cached, sender=_model, dispatch_uid=f"contracts-cache-{_model.__name__}-save")
    post_delete.connect(_forget_cached, sender=_model, dispatch_uid=f"contracts-cache-{_model.__name__}-delete")


def export_document() -> dict:
    """The spec §2 document for every stored version and wait reason (`steps` only where a version has them)."""
    versions = list(ContractVersion.objects.all())
    document = {
        "wait_reasons": list(WaitReason.objects.values_list("code", flat=True)),
        "routes": {cv.version: cv.routes for cv in versions},
    }
    if steps := {cv.version: cv.steps for cv in versions if cv.steps is not None}:
        document["steps"] = steps
    return document


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
    wanted_steps = wanted.get("steps", {})
    for version, routes in wanted["routes"].items():
        current, steps = existing.get(version), wanted_steps.get(version)
        if current is None:
            ContractVersion.objects.create(version=version, routes=routes, steps=steps)
            added.append(version)
        elif (changed := _changed_field(current, routes, steps)) is None:
            unchanged.append(version)
        elif current.is_referenced():
            msg = (
                f"{changed}.{version}: is referenced by handoffs and cannot change; import it under a new version name"
            )
            raise ContractConflict(msg)
        else:
            current.routes, current.steps = routes, steps
            current.save(update_fields=["routes", "steps"])
            updated.append(version)
    codes = sorted(contracts.wait_reasons)
    WaitReason.objects.exclude(code__in=codes).delete()
    for code in codes:
        WaitReason.objects.get_or_create(code=code)
    return ImportResult(tuple(added), tuple(updated), tuple(unchanged), tuple(codes))


@transaction.atomic
def add_document(document: object, *, source: str) -> ImportResult:
    """Store what a document adds and nothing else: new versions, new wait reasons (a graph's shipped contract).

    A version already stored with the same content is unchanged; one stored with other content is
    refused whether or not handoffs reference it (versions are never edited), with `ContractConflict`
    naming the version and `source`; nothing is written then. Wait reasons are only added. An import
    that adds anything is audited as a system action naming `source`.
    """
    contracts = bundle.parse_contracts(document)
    wanted = bundle.contracts_to_dict(contracts)
    existing = {cv.version: cv for cv in ContractVersion.objects.select_for_update()}
    added, unchanged = [], []
    wanted_steps = wanted.get("steps", {})
    for version, routes in wanted["routes"].items():
        current, steps = existing.get(version), wanted_steps.get(version)
        if current is None:
            ContractVersion.objects.create(
                version=version, routes=routes, steps=steps, note=f"shipped by {source}"[:200]
            )
            added.append(version)
        elif (changed := _changed_field(current, routes, steps)) is None:
            unchanged.append(version)
        else:
            msg = (
                f"{changed}.{version}: {source} ships other {changed} than the stored version {version}; "
                "versions are never edited, so ship the new content under a new version name"
            )
            raise ContractConflict(msg)
    known = set(WaitReason.objects.values_list("code", flat=True))
    new_reasons = sorted(set(contracts.wait_reasons) - known)
    for code in new_reasons:
        WaitReason.objects.get_or_create(code=code)
    if added or new_reasons:
        audit.log(
            actor=None,
            action="contracts.ship",
            object_type="contracts",
            object_id=",".join(added)[:200] or "wait reasons",
            outcome=AuditEntry.Outcome.DONE,
            detail={"source": source[:200], "added": added[:50], "wait_reasons_added": new_reasons[:50]},
        )
    return ImportResult(tuple(added), (), tuple(unchanged), tuple(sorted(known | set(new_reasons))))


def _changed_field(current: ContractVersion, routes: dict, steps: dict | None) -> str | None:
    """Which part of a stored version the document changes ("routes" or "steps"), or None."""
    before, after = _normalized(current.routes, current.steps), _normalized(routes, steps)
    return next((name for name in ("routes", "steps") if before.get(name) != after.get(name)), None)


def _normalized(routes: object, steps: object) -> dict:
    """One version's routes and steps as the parser writes them back (steps absent when there are none)."""
    document = {"wait_reasons": [], "routes": {"v": routes}}
    if steps is not None:
        document["steps"] = {"v": steps}
    found = bundle.contracts_to_dict(bundle.parse_contracts(document))
    return {"routes": found["routes"]["v"], **({"steps": found["steps"]["v"]} if "steps" in found else {})}


# --- a new version in the admin: where it starts, what it changes ---------------


@dataclass(frozen=True)
class RouteChange:
    """One route (sender → receiver) that differs between two versions' routes."""

    sender: str
    receiver: str
    change: str  # "added", "removed" or "keys changed"
    keys_before: tuple[str, ...]
    keys_after: tuple[str, ...]

    @property
    def added_keys(self) -> tuple[str, ...]:
        return tuple(k for k in self.keys_after if k not in self.keys_before)

    @property
    def removed_keys(self) -> tuple[str, ...]:
        return tuple(k for k in self.keys_before if k not in self.keys_after)


def latest_version() -> ContractVersion | None:
    return ContractVersion.objects.order_by("-created_at", "-pk").first()


def suggest_version_name(base: str) -> str:
    """An unused name after `base`: routes/1 → routes/2 (or the next free number), else base/2."""
    stem, number = base, 1
    if match := re.fullmatch(r"(.*?)(\d+)", base):
        stem, number = match.group(1), int(match.group(2))
    else:
        stem = f"{base}/"
    taken = set(ContractVersion.objects.values_list("version", flat=True))
    number += 1
    while f"{stem}{number}" in taken:
        number += 1
    return f"{stem}{number}"


def route_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> list[RouteChange]:
    """Added and removed receivers and changed required keys, sender by sender (both sides already valid)."""
    old, new = _routes_of(before or {}), _routes_of(after)
    changes = []
    for sender, receiver in sorted(set(old) | set(new)):
        keys_before, keys_after = old.get((sender, receiver)), new.get((sender, receiver))
        if keys_before == keys_after:
            continue
        if keys_before is None:
            change = "added"
        elif keys_after is None:
            change = "removed"
        else:
            change = "keys changed"
        changes.append(RouteChange(sender, receiver, change, keys_before or (), keys_after or ()))
    return changes


def diff_lines(before: Mapping[str, Any] | None, after: Mapping[str, Any], *, names: tuple[str, str]) -> list[str]:
    """A unified diff of the two routes documents as indented JSON."""
    old, new = (json.dumps(doc or {}, indent=2, sort_keys=True).splitlines() for doc in (before, after))
    return list(difflib.unified_diff(old, new, fromfile=names[0], tofile=names[1], lineterm=""))


def _routes_of(routes: Mapping[str, Any]) -> dict[tuple[str, str], tuple[str, ...]]:
    return {
        (sender, receiver): tuple(keys)
        for sender, receivers in routes.items()
        for receiver, keys in (receivers or {}).items()
    }
