"""Declaring what a run showed: an admin stores the draft contract version its rejected routes give.

The verdicts stay fail-closed until then (receipts.ingest.drafts builds the draft, never stores it).
Declaring needs the change-limits permission, is audited, and is idempotent: the same version with
the same routes again is a no-op; a draft that changed since the page was drawn, or a version stored
meanwhile with other routes, is refused in words. The handoffs the draft covers are judged again at
once (receipts.ingest.recording.reclassify), so a wait held up by its route can then be decided.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from receipts.actions.policy import CHANGE_LIMITS, Outcome, Policy, Result, User, check, log_attempt, may, noop, refuse
from receipts.ingest import drafts
from receipts.ingest.recording import reclassify
from receipts.models import AuditEntry, ContractVersion, Handoff, Run
from receipts.verdicts import bundle

DECLARE_ROUTES = Policy(
    "contracts.declare", (CHANGE_LIMITS,), "run", doing="Declaring the routes a run showed as a contract version"
)


def run_drafts(run: Run) -> list[drafts.Draft]:
    """The drafts `run`'s rejected handoffs give (none when its routes are all declared)."""
    return drafts.drafts_for(drafts.rejected_handoffs(Handoff.objects.filter(run=run)))


def declare(*, user: User, run_id: object, version: str, digest: str, key: str, reason: str = "") -> Result:
    """Store the draft `version` of the run's rejected routes, as drawn (`digest`), and judge them again."""
    found = check(user, DECLARE_ROUTES, run_id)
    if not found.ok:
        return found
    run = found.run
    with transaction.atomic():
        list(ContractVersion.objects.select_for_update().filter(version=version))  # one declaration at a time
        draft = next((d for d in run_drafts(run) if d.version == version), None)
        stored = ContractVersion.objects.filter(version=version).first()
        if draft is None and stored is not None:
            return noop(user, DECLARE_ROUTES, run, key, f"{version} is declared already; nothing changed.")
        if draft is None or draft.digest != digest:
            refusal = (
                "What this run showed has changed since the page was drawn: review the new draft and declare again."
            )
            return refuse(user, DECLARE_ROUTES, run, key, refusal)
        if stored is not None:
            refusal = f"{version} was stored meanwhile with other routes; versions are never edited."
            return refuse(user, DECLARE_ROUTES, run, key, refusal)
        try:
            bundle.parse_contracts({"wait_reasons": [], "routes": {version: draft.routes}})
        except bundle.BundleError as exc:
            return refuse(user, DECLARE_ROUTES, run, key, f"The draft cannot be a contract: {exc}")
        note = f"declared from run {run.operation_id}"[:200]
        try:
            with transaction.atomic():
                ContractVersion.objects.create(
                    version=version, routes=draft.routes, created_by=_person(user), note=note
                )
        except IntegrityError:  # another declaration of the same name won the race
            return noop(user, DECLARE_ROUTES, run, key, f"{version} was declared meanwhile; nothing changed.")
        detail = {
            "version": version,
            "based_on": draft.based_on,
            "changed": [f"{c.sender}→{c.receiver}: {c.change}" for c in draft.changes][:50],
        }
        done = AuditEntry.Outcome.DONE
        log_attempt(user, DECLARE_ROUTES.name, DECLARE_ROUTES, run, done, reason=reason, key=key, detail=detail)
    judged_again = sum(reclassify(h) for h in Handoff.objects.filter(pk__in=draft.handoff_pks).only("pk"))
    follows = (
        "Its handoffs are judged by it now."
        if draft.follows_on_its_own
        else f"Senders follow it once their route_version names {version}."
    )
    return Result(Outcome.DONE, f"{version} is declared. {follows} {judged_again} verdicts changed.", run)


def may_declare(user: User | None) -> bool:
    return may(user, DECLARE_ROUTES)


def _person(user: User):
    return user if getattr(user, "is_authenticated", False) else None
