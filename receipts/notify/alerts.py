"""Alert rules: conditions on the evidence, announced on a channel when they start and when they end.

The kinds (`AlertRule.Kind`): a verdict on an agent, more than N non-healthy handoffs in M minutes, a
wait overdue, worker heartbeats lost, work no worker applied, and observed runs gone silent. Verdict rules
react at once to `handoff_changed`, inside the recording transaction; every rule is also evaluated by
Celery beat every few seconds (a window passing, a deadline passing or a worker stopping changes no handoff).

Each rule keeps its state (firing, announced, when the last firing was sent). A firing is sent once per
condition, unless the rule is muted or its cooldown since the last firing sent has not passed; it is sent
later, while the condition still holds, once they have. A resolve is sent when an announced condition
ends (a muted rule sends it after the mute). Messages are deliveries (receipts.notify.notifications).

Rules act on settled verdicts only (spec v1.2): a handoff in progress (receipts.ingest.health.due_part: a failing
verdict whose due part has not arrived and whose handoff is not settled) matches no rule. One that turns
healthy before it settles never fires; one that settles still failing fires then, once (its latest verdict
change is the settle).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import KombuError
from redis import RedisError

from receipts.ingest import batches, health, silence
from receipts.ingest.signals import Change, handoffs_changed
from receipts.models import AlertRule, Handoff, VerdictChange
from receipts.notify import notifications, outbox
from receipts.org import teams
from receipts.verdicts.bundle import VERDICTS
from receipts.verdicts.words import ALERTABLE, verdict_words

log = logging.getLogger(__name__)

FIRED = "alert.fired"
RESOLVED = "alert.resolved"
# The verdicts a window rule counts: those that make a run failing or needing attention.
NON_HEALTHY = tuple(
    verdict
    for verdict, (level, _) in health.VERDICT_REASONS.items()
    if level in health.ALARMING and verdict in VERDICTS
)
# The failing verdicts (not uncertain, not waiting): the default "settled failing" rule counts these (issue 30 §5).
FAILING = tuple(
    verdict for verdict, (level, _) in health.VERDICT_REASONS.items() if level == health.FAILING and verdict in VERDICTS
)


@dataclass(frozen=True)
class RuleState:
    firing: bool
    announced: bool
    fired_at: datetime | None


def step(
    state: RuleState, holds: bool, now: datetime, *, cooldown: timedelta, muted_until: datetime | None
) -> tuple[RuleState, str | None]:
    """The rule's next state and what to send now (FIRED, RESOLVED or None): the one rule of announcing."""
    quiet = muted_until is not None and now < muted_until
    if holds and not state.announced:
        if quiet or (state.fired_at is not None and now < state.fired_at + cooldown):
            return RuleState(True, False, state.fired_at), None
        return RuleState(True, True, now), FIRED
    if not holds and state.announced and not quiet:
        return RuleState(False, False, state.fired_at), RESOLVED
    return RuleState(holds, state.announced, state.fired_at), None


@dataclass(frozen=True)
class Condition:
    holds: bool
    count: int
    words: str  # what holds, for people: codes, names and counts
    newest: Handoff | None = None  # the latest matching handoff: the link goes to its run


# --- evaluating ---------------------------------------------------------------------------------


def evaluate_all(*, now: datetime | None = None, workers_answering: Callable[[int], int] | None = None) -> int:
    """Evaluate every active rule (Celery beat); returns how many messages were promised.

    `workers_answering(enough)` counts the live workers (a broadcast ping that stops waiting once `enough`
    answered), asked once and only when a heartbeat rule is active.
    """
    now = now or timezone.now()
    rules = list(AlertRule.objects.filter(active=True).order_by("pk").values_list("pk", "kind", "threshold"))
    expected = [max(threshold, 1) for _, kind, threshold in rules if kind == AlertRule.Kind.HEARTBEAT]
    workers = (workers_answering or ping_workers)(max(expected)) if expected else None
    promised = 0
    for pk, _, _ in rules:
        with transaction.atomic():
            promised += evaluate(pk, now=now, workers=workers) is not None
    return promised


@receiver(handoffs_changed, dispatch_uid="receipts.notify.alerts.react_to_verdicts")
def react_to_verdicts(sender, changes: list[Change], **kwargs) -> None:
    """Verdict rules on the verdicts these handoffs just turned, or just settled in, evaluated in the
    recording transaction.

    Only a rule not yet announcing can change here (a handoff makes its condition hold). The active verdict
    rules are read from a cache (`verdict_rules`); only when one matches a change is the database asked which
    of them are not announcing yet. A handoff in progress holds no condition. A condition that ends (the
    handoff left the verdict, or an operator settled it) is resolved by the beat evaluation, seconds later.
    """
    turned = [change for change in changes if _turned(change)]
    if not turned:
        return
    owners: dict[int, list] = {}  # run pk -> [its team's pk], asked once per run and only for a team's rule
    matching = {
        pk
        for pk, verdict, agent, team_id in verdict_rules()
        for change in turned
        if verdict == change.after.verdict
        and agent in ("", change.handoff.sender, change.handoff.receiver)
        # issue 22 §2: a team's rule counts only that team's runs
        and (
            team_id is None or team_id == _team_id_of(change.handoff.run, owners.setdefault(change.handoff.run_id, []))
        )
    }
    if not matching:
        return
    quiet = AlertRule.objects.filter(pk__in=matching, active=True).exclude(firing=True, announced=True)
    for pk in quiet.order_by("pk").values_list("pk", flat=True):
        evaluate(pk, now=turned[-1].now)


def _turned(change: Change) -> bool:
    """Whether the change gave the handoff a final verdict it did not have (or had in progress)."""
    before, after = change.before, change.after
    return after.final and not (before is not None and before.verdict == after.verdict and before.final)


# --- the cache of active verdict rules ------------------------------------------------------------------

_RULES_VERSION = "alerts:verdict-rules:version"
# (version, [(pk, verdict, agent)]) of this process's last read; replaced whole, so threads never see half of it.
_rules_cached: tuple[str, list[tuple[int, str, str, int | None]]] | None = None


def verdict_rules() -> list[tuple[int, str, str, int | None]]:
    """The active verdict rules as (pk, verdict, agent, team pk or None).

    A recording batch on PostgreSQL read them with its first statements (`batches.Batch.verdict_rules`): as
    stored then, no cache asked. Elsewhere they are read once per change of the rules: a version in the
    shared cache is bumped whenever a rule is saved or deleted, in any process (at once, and again after
    commit, so another process never keeps what it read before the commit); without the cache the rules are
    read every time.
    """
    global _rules_cached
    batch = batches.current()
    if batch is not None and batch.verdict_rules is not None:
        return batch.verdict_rules  # read with the batch's first statements, in its transaction
    try:
        version = cache.get(_RULES_VERSION)
        if version is None:
            version = uuid.uuid4().hex
            cache.add(_RULES_VERSION, version, timeout=None)
            version = cache.get(_RULES_VERSION) or version
    except RedisError:
        version = None
    cached = _rules_cached
    if version is not None and cached is not None and cached[0] == version:
        return cached[1]
    rules = AlertRule.objects.filter(active=True, kind=AlertRule.Kind.VERDICT).order_by("pk")
    found = list(rules.values_list("pk", "verdict", "agent", "team_id"))
    _rules_cached = (version, found) if version is not None else None
    return found


# Fields only the evaluation writes: saving them changes no rule's match.
_STATE_FIELDS = frozenset({"firing", "announced", "fired_at", "notices", "changed_at"})


@receiver(post_save, sender=AlertRule, dispatch_uid="receipts.notify.alerts.rules_saved")
@receiver(post_delete, sender=AlertRule, dispatch_uid="receipts.notify.alerts.rules_deleted")
def _rules_changed(sender, update_fields=None, **kwargs) -> None:
    if update_fields is not None and set(update_fields) <= _STATE_FIELDS:
        return
    forget_verdict_rules()
    transaction.on_commit(forget_verdict_rules)


def forget_verdict_rules() -> None:
    """Make every process read the active verdict rules again (a rule was saved or deleted)."""
    global _rules_cached
    _rules_cached = None
    try:
        cache.set(_RULES_VERSION, uuid.uuid4().hex, timeout=None)
    except RedisError:
        log.warning("alerts: the rules cache version could not be bumped")


def _team_id_of(run, known: list) -> int | None:
    if not known:
        team = teams.owner_of(run)
        known.append(team.pk if team is not None else None)
    return known[0]


def evaluate(rule_pk: int, *, now: datetime, workers: int | None = None) -> str | None:
    """Evaluate one rule under its row lock (call inside a transaction); FIRED, RESOLVED or None."""
    rule = AlertRule.objects.select_for_update(of=("self",)).select_related("channel", "team").get(pk=rule_pk)
    if rule.kind == AlertRule.Kind.HEARTBEAT and workers is None:
        return None  # no fresh answer from the workers: the beat evaluation asks them
    condition = condition_of(rule, now, workers=workers)
    before = RuleState(rule.firing, rule.announced, rule.fired_at)
    cooldown = timedelta(minutes=rule.cooldown_minutes)
    after, notice = step(before, condition.holds, now, cooldown=cooldown, muted_until=rule.muted_until)
    if after == before and notice is None:
        return None
    if after.firing != before.firing:
        rule.changed_at = now
    rule.firing, rule.announced, rule.fired_at = after.firing, after.announced, after.fired_at
    if notice == FIRED:
        rule.notices += 1  # numbers the firing: its key, and its resolve's
    rule.save(update_fields=["firing", "announced", "fired_at", "notices", "changed_at"])
    if notice is not None:
        _announce(rule, notice, condition, now)
    return notice


def condition_of(rule: AlertRule, now: datetime, *, workers: int | None = None) -> Condition:
    """Whether the rule's condition holds at `now`, with its count and words."""
    if rule.kind == AlertRule.Kind.HEARTBEAT:
        expected = max(rule.threshold, 1)
        answering = workers or 0
        return Condition(answering < expected, answering, f"{answering} of {expected} workers answering")
    if rule.kind == AlertRule.Kind.UNAPPLIED:
        return _unapplied(rule, now)
    if rule.kind == AlertRule.Kind.SILENT:
        return _silent(rule)
    if rule.kind == AlertRule.Kind.OVERDUE:
        found = _scoped(Handoff.objects.filter(wait_open=True, wait_deadline__lte=now), rule.agent)
        words = "waits overdue"
    else:
        verdicts, what = counted(rule)
        found = recently_turned(verdicts, rule.agent, since=now - timedelta(minutes=rule.window_minutes))
        words = f"{what} handoffs in {rule.window_minutes} min"
    if rule.team_id is not None:  # a team's rule counts that team's runs only (issue 22 §2)
        found = found.filter(teams.owns_q(teams.Team.objects.filter(pk=rule.team_id), "run__"))
        words += f" of team {rule.team.slug}"
    count = found.count()
    newest = found.select_related("run").order_by("-updated_at", "-pk").first() if count else None
    agent = f" on {rule.agent}" if rule.agent else ""
    return Condition(count > rule.threshold, count, f"{count} {words}{agent} (more than {rule.threshold})", newest)


def counted(rule: AlertRule) -> tuple[tuple[str, ...], str]:
    """The verdicts a verdict or window rule counts, and their words in its message.

    A window rule counts the verdicts chosen for it (in their words: "failing" for exactly the failing ones),
    or every non-healthy verdict when none is chosen.
    """
    if rule.kind == AlertRule.Kind.VERDICT:
        return (rule.verdict,), verdict_words(rule.verdict)
    chosen = tuple(verdict for verdict in ALERTABLE if verdict in (rule.verdicts or ()))
    if not chosen:
        return NON_HEALTHY, "non-healthy"
    if set(chosen) == set(FAILING):
        return chosen, "failing"
    return chosen, " or ".join(verdict_words(verdict) for verdict in chosen)


def _unapplied(rule: AlertRule, now: datetime) -> Condition:
    # issue 19 §1: starts, resumes and re-verifications promised longer ago than the apply bound that no
    # worker has taken on (the outbox keeps sending them; this says nobody is taking them).
    count = outbox.unapplied(now=now).count()
    bound = settings.SIDEWISP_INTENT_APPLY_SECONDS
    words = f"{count} promised starts, resumes or re-verifications not applied by a worker within {bound} s"
    return Condition(count > rule.threshold, count, f"{words} (more than {rule.threshold})")


def _silent(rule: AlertRule) -> Condition:
    # issue 29 item 5: running observed runs whose app sent no receipt for SIDEWISP_SILENT_AFTER.
    found = silence.silent_runs()
    words = f"observed runs silent for {settings.SIDEWISP_SILENT_AFTER} s or more"
    if rule.team_id is not None:
        found = found.filter(teams.owns_q(teams.Team.objects.filter(pk=rule.team_id)))
        words += f" of team {rule.team.slug}"
    count = found.count()
    return Condition(count > rule.threshold, count, f"{count} {words} (more than {rule.threshold})")


def recently_turned(verdicts: tuple[str, ...], agent: str, *, since: datetime) -> QuerySet[Handoff]:
    """Handoffs whose latest verdict change, at or after `since`, gave them one of `verdicts`.

    A false completion an operator settled (accepted or resolved) no longer counts: its latest change is
    the settlement. A handoff in progress does not count yet; the settle that makes its verdict final is a
    change of its own (cause "settled").
    """
    latest = VerdictChange.objects.filter(handoff=OuterRef("pk")).order_by("-at", "-pk")
    found = _scoped(Handoff.objects.filter(verdict__in=verdicts, updated_at__gte=since), agent)
    found = found.exclude(health.due_condition())
    found = found.annotate(
        changed_at=Subquery(latest.values("at")[:1]), latest_cause=Subquery(latest.values("cause")[:1])
    )
    return found.filter(changed_at__gte=since).exclude(latest_cause__in=health.SETTLEMENT_CAUSES)


def ping_workers(enough: int) -> int:
    """How many Celery workers answer a broadcast ping now, counting up to `enough` (0: no broker)."""
    try:
        replies = current_app.control.ping(timeout=settings.SIDEWISP_WORKER_PING_TIMEOUT, limit=enough)
    except (OSError, RedisError, KombuError) as exc:
        log.warning("alerts: worker ping failed: %s", type(exc).__name__)
        return 0
    return len(replies or [])


def _scoped(handoffs: QuerySet[Handoff], agent: str) -> QuerySet[Handoff]:
    return handoffs.filter(Q(sender=agent) | Q(receiver=agent)) if agent else handoffs


# --- announcing ---------------------------------------------------------------------------------


def _announce(rule: AlertRule, notice: str, condition: Condition, now: datetime) -> None:
    newest = condition.newest
    payload = {
        "event": notice,
        "at": notifications.iso(now),
        "rule": rule.name,
        "rule_id": rule.pk,
        "kind": rule.kind,
        "condition": condition.words,
        "verdict": rule.verdict,
        "verdict_words": verdict_words(rule.verdict) if rule.verdict else "",
        "agent": rule.agent,
        "count": condition.count,
        "threshold": rule.threshold,
        "window_minutes": rule.window_minutes,
        "since": notifications.iso(rule.changed_at) if rule.changed_at else None,
        "run": newest.run_id if newest else None,
        "operation_id": newest.run.operation_id if newest else None,
        "handoff_id": newest.handoff_id if newest else None,
        "link": notifications.link(_page(rule, newest)),
    }
    key = notifications.key(notice, rule.pk, rule.notices, rule.channel_id)
    run = newest.run if newest else None
    notifications.promise(rule.channel, notice, payload, key=key, run=run, now=now)


def _page(rule: AlertRule, newest: Handoff | None) -> str:
    if newest is not None and rule.kind != AlertRule.Kind.OVERDUE:
        return reverse("sidewisp:run-detail", args=[newest.run_id]) + f"#handoff-{newest.pk}"
    return {
        AlertRule.Kind.OVERDUE: reverse("sidewisp:waits"),
        AlertRule.Kind.HEARTBEAT: reverse("sidewisp:system"),
        AlertRule.Kind.UNAPPLIED: reverse("sidewisp:system"),
    }.get(rule.kind, reverse("sidewisp:runs"))
