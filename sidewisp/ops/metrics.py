"""The Prometheus endpoint: what the database and Redis hold, read at scrape time.

A custom collector queries the database on every scrape (a fixed number of aggregates, however many handoffs
there are), so the numbers are the database's own and no process keeps counters that a multi-process deployment
would have to merge. What lives outside the database comes from Redis: the Celery queue's length, the heartbeats
sidewisp.ops.health reads, the count of unpublished health events and the writers' and API's counters, and
each process's evidence writer as it last reported it (sidewisp.ops.writers).

Access is default deny (sidewisp.ops.metricsaccess).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Min, Q
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from receipts import retention
from receipts.ingest import silence
from receipts.models import Handoff, MiddlewareReport, Receipt
from receipts.notify import outbox
from receipts.queries import dashboard
from receipts.tasks import beat_heartbeat_key
from sidewisp.ops import health, metricsaccess, writers
from sidewisp.ops.writers import WRITER_COUNTS, writer_count_key

# Agents beyond this many (the busiest keep their names) share the label "other": a fleet that invents
# agent names cannot blow up the number of series.
MAX_AGENT_LABELS = 50
NO_AGENT = "none"
OTHER_AGENTS = "other"
# Recording latency is read from the newest receipts only: at most this many, recorded this recently.
LATENCY_SAMPLE_RECEIPTS = 1000
LATENCY_WINDOW = timedelta(minutes=5)
LATENCY_QUANTILES = (0.5, 0.9, 0.99, 1.0)
# The field holding the part's own time (when the agent side saw it happen), per receipt part.
PART_TIME_FIELDS = {"created": "at", "reduced": "at", "destination": "started_at", "verification": "checked_at"}
# kombu's Redis transport keeps a queue's messages of priority p > 0 under "<queue>\x06\x16<p>".
_PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")
_REDIS_TIMEOUT_SECONDS = 1.0
# How long the time a worker was last seen is kept: a deployment gone for longer leaves no key behind.
WORKER_SEEN_SECONDS = 24 * 3600

logger = logging.getLogger(__name__)


@never_cache
@require_GET
def scrape(request: HttpRequest) -> HttpResponse:
    if refused := metricsaccess.refusal(request):
        return refused
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SidewispCollector())
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(registry), content_type=content_type)


class SidewispCollector:
    """Every Sidewisp metric, computed when Prometheus asks (prometheus_client's custom collector protocol)."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or timezone.now()

    def collect(self) -> Iterator[Metric]:
        yield self._handoffs()
        yield self._open_false_completions()
        yield self._silent_runs()
        yield from self._waits()
        yield self._receipts()
        yield self._evidence_reports()
        yield self._unapplied_intents()
        yield from self._recording_latency()
        yield from self._redis_facts()
        yield from self._writer_processes()
        yield from self._heartbeats()
        yield from self._retention()

    def _handoffs(self) -> Metric:
        rows = list(Handoff.objects.order_by().values_list("verdict", "sender", "receiver").annotate(n=Count("pk")))
        busiest: Counter[str] = Counter()
        for _, sender, receiver, n in rows:
            busiest[sender] += n
            busiest[receiver] += n
        del busiest[""]  # no agent named: a label of its own
        named = {agent for agent, _ in busiest.most_common(MAX_AGENT_LABELS)}
        counts: Counter[tuple[str, str, str]] = Counter()
        for verdict, sender, receiver, n in rows:
            counts[verdict, _agent_label(sender, named), _agent_label(receiver, named)] += n
        metric = GaugeMetricFamily(
            "sidewisp_handoffs",
            "Handoffs by current verdict, sending agent and receiving agent.",
            labels=["verdict", "sender", "receiver"],
        )
        for labels, n in sorted(counts.items()):
            metric.add_metric(labels, n)
        return metric

    def _silent_runs(self) -> Metric:
        # issue 29 item 5: observed runs still "running" whose app sent nothing for SIDEWISP_SILENT_AFTER.
        return GaugeMetricFamily(
            "sidewisp_runs_silent",
            "Running observed runs whose app sent no receipt for SIDEWISP_SILENT_AFTER seconds.",
            value=silence.silent_runs().count(),
        )

    def _open_false_completions(self) -> Metric:
        # A settled false completion keeps its verdict in sidewisp_handoffs; this counts those still open.
        return GaugeMetricFamily(
            "sidewisp_open_false_completions",
            "False completions no operator has accepted or resolved.",
            value=dashboard.false_completion_count(),
        )

    def _waits(self) -> Iterator[Metric]:
        waits = Handoff.objects.filter(wait_open=True).aggregate(
            open=Count("pk"), overdue=Count("pk", filter=Q(wait_deadline__lte=self.now))
        )
        yield GaugeMetricFamily("sidewisp_open_waits", "Waits on a person not yet decided.", value=waits["open"])
        yield GaugeMetricFamily(
            "sidewisp_overdue_waits", "Open waits whose deadline has passed.", value=waits["overdue"]
        )
        opened = Receipt.objects.filter(part="wait", handoff__wait_open=True).aggregate(first=Min("recorded_at"))
        oldest = GaugeMetricFamily(
            "sidewisp_open_wait_oldest_age_seconds",
            "Seconds since the oldest open wait was recorded (no sample when no wait is open).",
        )
        if opened["first"] is not None:
            oldest.add_metric([], max((self.now - opened["first"]).total_seconds(), 0.0))
        yield oldest

    def _receipts(self) -> Metric:
        metric = CounterMetricFamily(
            "sidewisp_receipts_recorded",
            "Receipt parts recorded (receipts are append-only: rate() gives the recording rate).",
            labels=["part"],
        )
        counts = dict(Receipt.objects.order_by().values_list("part").annotate(n=Count("pk")))
        for part in sorted(counts):
            metric.add_metric([part], counts[part])
        return metric

    def _evidence_reports(self) -> Metric:
        # Spec v1.3 "nothing dropped in silence": what the recording side could not store as it was, by why.
        metric = GaugeMetricFamily(
            "sidewisp_evidence_reports",
            "Reports on runs of evidence not stored as it was: evidence_dropped (a field or an entry left out: "
            "reason is the writer's error or the server's HTTP status, none for a field that did not validate), "
            "value_redacted (an id or name stored redacted).",
            labels=["kind", "reason"],
        )
        kinds = (MiddlewareReport.Kind.EVIDENCE_DROPPED, MiddlewareReport.Kind.VALUE_REDACTED)
        rows = MiddlewareReport.objects.filter(kind__in=kinds).order_by().values_list("kind", "detail__reason")
        counts: Counter[tuple[str, str]] = Counter()
        for kind, reason, n in rows.annotate(n=Count("pk")):
            counts[kind, str(reason or "none")[:100]] += n
        for labels, n in sorted(counts.items()):
            metric.add_metric(labels, n)
        return metric

    def _unapplied_intents(self) -> Metric:
        # issue 19 §1: promised work no worker has taken on within the apply bound (sent or not).
        counts = dict(outbox.unapplied(now=self.now).values("kind").annotate(n=Count("pk")).values_list("kind", "n"))
        metric = GaugeMetricFamily(
            "sidewisp_intents_unapplied",
            f"Starts, resumes and re-verifications promised more than {settings.SIDEWISP_INTENT_APPLY_SECONDS} s "
            "ago that no worker has applied yet (the outbox keeps sending them).",
            labels=["kind"],
        )
        for kind in outbox.WORK_KINDS:
            metric.add_metric([kind], counts.get(kind, 0))
        return metric

    def _recording_latency(self) -> Iterator[Metric]:
        since = self.now - LATENCY_WINDOW
        newest = Receipt.objects.order_by("-pk").values_list("part", "payload", "recorded_at")[:LATENCY_SAMPLE_RECEIPTS]
        latencies = sorted(
            latency
            for part, payload, recorded_at in newest
            if recorded_at >= since and (latency := _latency_seconds(part, payload, recorded_at)) is not None
        )
        yield GaugeMetricFamily(
            "sidewisp_recent_recording_latency_receipts",
            f"Receipts in the latency sample: the newest {LATENCY_SAMPLE_RECEIPTS} recorded in the last "
            f"{LATENCY_WINDOW.seconds // 60} minutes whose part carries its own time.",
            value=len(latencies),
        )
        metric = GaugeMetricFamily(
            "sidewisp_recent_recording_latency_seconds",
            "Seconds from a part's own time to its receipt being recorded, quantiles over the latency sample.",
            labels=["quantile"],
        )
        for q in LATENCY_QUANTILES if latencies else ():
            metric.add_metric([str(q)], latencies[max(math.ceil(q * len(latencies)) - 1, 0)])
        yield metric

    def _redis_facts(self) -> Iterator[Metric]:
        queue = settings.CELERY_TASK_DEFAULT_QUEUE
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=_REDIS_TIMEOUT_SECONDS, socket_timeout=_REDIS_TIMEOUT_SECONDS
        )
        try:
            pipe = client.pipeline(transaction=False)
            for suffix in _PRIORITY_SUFFIXES:
                pipe.llen(queue + suffix)
            pipe.get(publish_failures_key())
            pipe.mget([writer_count_key(name) for name in WRITER_COUNTS])
            pipe.get(refused_receipts_key())
            *lengths, failures, writer_counts, refused = pipe.execute()
        except redis.RedisError as exc:
            logger.warning("metrics: Redis not readable: %s", type(exc).__name__)
            yield GaugeMetricFamily("sidewisp_redis_up", "1 when Redis answered this scrape.", value=0)
            return
        finally:
            client.close()
        yield GaugeMetricFamily("sidewisp_redis_up", "1 when Redis answered this scrape.", value=1)
        yield GaugeMetricFamily(
            "sidewisp_celery_queue_length", "Celery tasks waiting in Sidewisp's queue.", value=sum(lengths)
        )
        yield CounterMetricFamily(
            "sidewisp_event_publish_failures",
            "Health event publishes (an event or a batch of them) that did not reach the channel layer.",
            value=int(failures or 0),
        )
        for (name, documentation), count in zip(WRITER_COUNTS.items(), writer_counts, strict=True):
            yield CounterMetricFamily(f"sidewisp_evidence_writer_{name}", documentation, value=int(count or 0))
        doc = "Bodies POST /api/v1/receipts refused as not valid (400) or out of scope (403): none of it stored."
        yield CounterMetricFamily("sidewisp_api_receipts_refused", doc, value=int(refused or 0))

    def _writer_processes(self) -> Iterator[Metric]:
        try:
            states = writers.processes()
        except redis.RedisError:
            return  # sidewisp_redis_up says why
        metric = GaugeMetricFamily(
            "sidewisp_evidence_writer_entries",
            "Each process's evidence writer as it last reported it: entries queued now, stored and dropped "
            "since the process started.",
            labels=["process", "state"],
        )
        for state in states:
            for name in ("queued", "stored", "dropped"):
                metric.add_metric([state["process"], name], state[name])
        yield metric

    def _heartbeats(self) -> Iterator[Metric]:
        now = time.time()
        worker = health.cached_worker_check()
        yield GaugeMetricFamily(
            "sidewisp_worker_up", "1 when a Celery worker answered a ping.", value=int(worker["ok"])
        )
        try:
            if worker["ok"]:
                cache.set(worker_seen_key(), now, WORKER_SEEN_SECONDS)
            seen, beat = cache.get(worker_seen_key()), cache.get(beat_heartbeat_key())
        except redis.RedisError:
            return  # sidewisp_redis_up says why
        yield GaugeMetricFamily(
            "sidewisp_worker_heartbeat_age_seconds",
            "Seconds since a Celery worker last answered a ping (+Inf: not within a day).",
            value=_age(now, seen),
        )
        yield GaugeMetricFamily(
            "sidewisp_beat_heartbeat_age_seconds",
            "Seconds since Celery beat's heartbeat task last ran (+Inf: none in the last hour).",
            value=_age(now, beat),
        )

    def _retention(self) -> Iterator[Metric]:
        # issue 22 §3: the newest pruning run, from its audit entry (nothing yet: no samples but the flag).
        last = retention.last_run()
        yield GaugeMetricFamily(
            "sidewisp_retention_runs_recorded", "1 when a retention pruning run is on record.", value=int(bool(last))
        )
        if last is None:
            return
        yield GaugeMetricFamily(
            "sidewisp_retention_last_run_timestamp_seconds",
            "When the last retention pruning run ended (Unix time).",
            value=last.at.timestamp(),
        )
        yield GaugeMetricFamily(
            "sidewisp_retention_last_run_duration_seconds", "How long the last pruning run took.", value=last.seconds
        )
        yield GaugeMetricFamily(
            "sidewisp_retention_last_run_failed",
            "1 when the last pruning run stopped early on a database error (the next run continues).",
            value=int(bool(last.error)),
        )
        yield GaugeMetricFamily(
            "sidewisp_retention_last_run_partitions_dropped",
            "Monthly receipt partitions the last pruning run dropped whole (PostgreSQL).",
            value=last.partitions_dropped,
        )
        removed = GaugeMetricFamily(
            "sidewisp_retention_last_run_removed_rows",
            "Rows the last pruning run removed, per kind (audit_entries_detached: kept, their run's link cleared).",
            labels=["kind"],
        )
        for kind in retention.KINDS:
            removed.add_metric([kind], last.removed[kind])
        yield removed


def _agent_label(agent: str, named: set[str]) -> str:
    if not agent:
        return NO_AGENT
    return agent if agent in named else OTHER_AGENTS


def _latency_seconds(part: str, payload: object, recorded_at: datetime) -> float | None:
    field = PART_TIME_FIELDS.get(part)
    if field is None or not isinstance(payload, dict) or not isinstance(payload.get(field), str):
        return None
    try:
        happened = datetime.fromisoformat(payload[field])
    except ValueError:
        return None
    # A part stamped ahead of the server's clock (a skewed agent host) counts as recorded at once.
    return max((recorded_at - happened).total_seconds(), 0.0)


def _age(now: float, stamp: object) -> float:
    return math.inf if stamp is None else max(now - float(stamp), 0.0)


def worker_seen_key() -> str:
    return f"system:worker-seen:{settings.CELERY_TASK_DEFAULT_QUEUE}"


def publish_failures_key() -> str:
    """The Redis counter of unpublished health events, under the deployment's queue name."""
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}:metrics:event_publish_failures"


class PublishFailureCounter(logging.Handler):
    """Counts, in Redis, each warning `receipts.ingest.broadcast` logs: it logs one per publish it could not make.

    In Redis, not the process: every process adds to one number that survives restarts. A failure while Redis
    itself is unreachable cannot be counted (sidewisp_redis_up shows that outage instead).
    """

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=0.2, socket_timeout=0.2)
        with contextlib.suppress(redis.RedisError), client:
            client.incr(publish_failures_key())


def count_publish_failures() -> None:
    """Attach the counter to the broadcast module's logger (SidewispConfig.ready, in every process)."""
    broadcast_logger = logging.getLogger("receipts.ingest.broadcast")
    if not any(isinstance(handler, PublishFailureCounter) for handler in broadcast_logger.handlers):
        broadcast_logger.addHandler(PublishFailureCounter())


def refused_receipts_key() -> str:
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}:metrics:api_receipts_refused"
