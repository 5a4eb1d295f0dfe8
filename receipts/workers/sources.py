"""Agents that run elsewhere: their per-source tokens and the receipts they post.

A source (an app on another host) posts receipts with a token made in the
admin. Only a digest of the token's secret is stored; a token finds its row by
its public `key_id` and its secret is compared in constant time. A token is
scoped to its source name: it may write only the runs its source created (a
run is created by the first receipt posted for it) and claim only their
decisions. A source's operation ids live in its own namespace (issue 29 §4: a
run is keyed by its source and its operation id), so a source never finds, blocks
or probes a local run or another source's: an id another side uses is, to it, a new id.

A posted body is either `{"entries": [...]}` (the `receipts.ingest.intake` format),
one `sidewisp.handoff/1` bundle, or a list of bundles. Everything in it is
stored in one transaction or nothing is.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Sequence
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from receipts.ingest import broadcast, intake, recording, runs
from receipts.models import FINAL_STATUS_PART, AuditEntry, Decision, MiddlewareReport, Run, SourceToken
from receipts.org import audit
from receipts.verdicts import bundle
from receipts.workers import claims

TOKEN_PREFIX = "swt"
_TOKEN = re.compile(rf"{TOKEN_PREFIX}_([0-9a-f]{{12}})_([A-Za-z0-9_-]{{43}})")
# last_used_at is a hint for the admin, not an audit trail: one write a minute per token at most.
_LAST_USED_EVERY = timedelta(minutes=1)


class OutOfScope(Exception):
    """The token's source may not write (or read) this run; `field` names the entry."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# --- tokens ---------------------------------------------------------------------------


def issue(
    source_name: str, *, note: str = "", by: AbstractBaseUser | None = None, token: SourceToken | None = None
) -> tuple[SourceToken, str]:
    """Save a new token for `source_name` (into `token` when given, e.g. the admin's unsaved form instance).

    Returns the row, which keeps a digest only, and the token itself, which is never shown again.
    """
    source_name = bundle.parse_name(source_name, "source_name")
    secret = secrets.token_urlsafe(32)
    token = token or SourceToken()
    token.source_name, token.note, token.created_by = source_name, note[:200], by
    token.key_id, token.digest = secrets.token_hex(6), _digest(secret)
    token.save()
    audit.log(
        actor=by,
        action="source_token.create",
        object_type="source_token",
        object_id=token.pk,
        outcome=AuditEntry.Outcome.DONE,
        detail={"source": source_name, "key_id": token.key_id},
    )
    return token, f"{TOKEN_PREFIX}_{token.key_id}_{secret}"


def authenticate(raw: str) -> SourceToken | None:
    """The active token `raw` is, or None (unknown, malformed or revoked)."""
    match = _TOKEN.fullmatch(raw)
    if match is None:
        return None
    key_id, secret = match.groups()
    token = SourceToken.objects.filter(key_id=key_id).first()
    if token is None or not hmac.compare_digest(token.digest, _digest(secret)):
        return None
    return token if token.is_active else None


def note_use(token: SourceToken) -> None:
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= _LAST_USED_EVERY:
        SourceToken.objects.filter(pk=token.pk).update(last_used_at=now)


def revoke(token: SourceToken, *, by: AbstractBaseUser | None) -> bool:
    """Revoke `token` for good (audited); False when it was revoked already."""
    revoked = SourceToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=by
    )
    audit.log(
        actor=by,
        action="source_token.revoke",
        object_type="source_token",
        object_id=token.pk,
        outcome=AuditEntry.Outcome.DONE if revoked else AuditEntry.Outcome.NOOP,
        detail={"source": token.source_name, "key_id": token.key_id},
    )
    return bool(revoked)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


# --- scope ----------------------------------------------------------------------------


def run_in_scope(token: SourceToken, operation_id: str) -> Run | None:
    """The run `operation_id` names in `token`'s source's namespace; None when there is none (issue 29 §4: another
    side's run under the same id is not this source's to see, and is answered like no run at all)."""
    return Run.objects.for_operation(operation_id, token.source_name).first()


def _claim_runs(token: SourceToken, entries: Sequence[intake.Entry]) -> set[str]:
    """Create the entries' new runs as this source's (in its namespace) and return their operation ids."""
    wanted = list(dict.fromkeys(entry.operation_id for entry in entries))
    new = set()
    for operation_id in wanted:
        _run, created = Run.objects.get_or_create(
            source_name=token.source_name,
            operation_id=operation_id,
            defaults={"thread_id": operation_id, "source": Run.Source.AGENT, "mode": Run.Mode.OBSERVED},
        )
        if created:
            new.add(operation_id)
    return new


# --- posted bodies ----------------------------------------------------------------------


def entries_from(body: object) -> list[intake.Entry]:
    """The entries a posted body holds; `bundle.BundleError` naming the field when it is not valid.

    A bundle's parts become part entries whose attempt is a digest of the part's
    minimized value: posting the same bundle again stores nothing, a bundle whose
    wait was decided since stores the new wait.
    """
    if isinstance(body, dict) and "entries" in body and "schema" not in body:
        entries = intake.parse_many(body["entries"])
        for index, entry in enumerate(entries):
            if isinstance(entry, intake.ReportEntry):
                _check_report(entry, f"entries[{index}]")
        return entries
    if isinstance(body, dict):
        return _bundle_entries(body, "")
    if isinstance(body, list):
        if len(body) > intake.MAX_ENTRIES:
            raise bundle.BundleError("body", f"must hold at most {intake.MAX_ENTRIES} bundles")
        return [entry for index, item in enumerate(body) for entry in _bundle_entries(item, f"[{index}].")]
    raise bundle.BundleError("body", 'must be {"entries": [...]}, a sidewisp.handoff/1 bundle or a list of bundles')


def _bundle_entries(value: object, where: str) -> list[intake.Entry]:
    try:
        parsed = bundle.parse_bundle(value)
    except bundle.BundleError as exc:
        raise bundle.BundleError(f"{where}{exc.field}", exc.message) from None
    entries: list[intake.Entry] = []
    for name in bundle.PARTS:
        if (part := getattr(parsed, name)) is not None:
            entries.append(_part_entry(parsed, name, bundle.part_to_dict(part)))
    if parsed.final_status is not None:
        entries.append(_part_entry(parsed, FINAL_STATUS_PART, parsed.final_status))
    return entries


def _part_entry(parsed: bundle.Bundle, part: str, value: object) -> intake.PartEntry:
    attempt = f"b-{recording.digest(part, json.dumps(value, sort_keys=True))}"
    return intake.PartEntry(parsed.operation_id, parsed.handoff_id, part, value, attempt)


def _check_report(entry: intake.ReportEntry, where: str) -> None:
    # recording.record_report drops a bad report quietly (observation must not raise); a poster hears why.
    if entry.report not in MiddlewareReport.Kind.values:
        raise bundle.BundleError(f"{where}.report", f"must be one of {', '.join(MiddlewareReport.Kind.values)}")
    bundle.parse_report_detail(entry.detail, f"{where}.detail")


def store(token: SourceToken, entries: Sequence[intake.Entry]) -> list[bool]:
    """Store `entries` for `token`'s source, all or nothing; one flag per entry (False: stored before).

    The app on the other host keeps no run row: a run the body creates is running, and a run's newest
    `final_status` in the body becomes its status. Raises OutOfScope, or `bundle.BundleError` naming the
    entry and its field; nothing is written then.
    """
    # One transaction, one recording batch (contracts read once, health once per run), one publish.
    # Recording as the source: a run of anyone else is refused again where the receipts are written.
    with broadcast.batched(), transaction.atomic(), recording.writing_as(token.source_name), recording.batch():
        statuses = dict.fromkeys(_claim_runs(token, entries), Run.Status.RUNNING)
        try:
            with transaction.atomic():  # a savepoint: a refused body leaves the transaction usable to name its entry
                stored = intake.apply(entries)  # consecutive parts as one set (issue 20 §2)
        except (recording.RunNotOwned, bundle.BundleError):
            _raise_naming_the_entry(entries)
            raise
        for entry, new in zip(entries, stored, strict=True):
            if new and isinstance(entry, intake.PartEntry) and entry.part == FINAL_STATUS_PART:
                statuses[entry.operation_id] = entry.value
        for run in Run.objects.filter(source_name=token.source_name, operation_id__in=statuses):
            runs.set_status(run, statuses[run.operation_id])
        return stored


def _raise_naming_the_entry(entries: Sequence[intake.Entry]) -> None:
    """The refusal of the first entry that fails, prefixed with its index (`entries[3].part`).

    Only on the way to refusing the body: the entries are applied again one at a time, in order, in a savepoint
    rolled back at the end, so an entry is judged after those before it as in the set and nothing of this search
    is kept (the caller's transaction is rolled back by the error anyway).
    """
    with transaction.atomic():
        for index, entry in enumerate(entries):
            try:
                intake.apply([entry])
            except recording.RunNotOwned as exc:
                raise OutOfScope(f"entries[{index}].operation_id", exc.message) from None
            except bundle.BundleError as exc:
                raise bundle.BundleError(f"entries[{index}].{exc.field}", exc.message) from None
        transaction.set_rollback(True)


def claim(token: SourceToken, decision: Decision) -> bool:
    """The app of `token`'s source takes `decision` (once): audited, its wait resolved, its run running."""
    with transaction.atomic():
        if not claims.claim(decision, resumed_by="remote app", source=token.source_name):
            return False
        claims.record_resolution(decision)
        runs.set_status(decision.run, Run.Status.RUNNING)
    return True
