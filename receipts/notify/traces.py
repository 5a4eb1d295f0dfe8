"""Handoff verdict changes as OpenTelemetry spans, exported over OTLP/HTTP when configured.

Off by default: unless SIDEWISP_OTLP_ENDPOINT is set nothing is built and
nothing leaves the process. When set, every change of a handoff's settled
verdict (its first final classification included; spec v1.2 "Settled") and
every operator settlement becomes one span: a verdict in progress (a failing
verdict whose due part has not arrived, receipts.ingest.health.due_part) is exported
once it is final, when its part arrives or when it settles. Each span is
named `handoff <sender>→<receiver>`, lasting from the handoff's creation to
the change. Its trace id is derived from the run's operation id, so the
spans of one run's handoffs, and the successive changes of one handoff, form
one trace. Attributes are names, ids, codes and times only (the span carries
no receipt part, context values, tool arguments or message text).

The span is built in the recording transaction (receipts.ingest.signals) from a
snapshot of the handoff, and handed to the SDK's BatchSpanProcessor after the
commit: a rolled-back change exports nothing, and recording never waits for
the collector (the processor's bounded queue drops spans rather than block).
"""

from __future__ import annotations

import hashlib
import threading
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from urllib.parse import urlsplit

from django.conf import settings
from django.core.signals import setting_changed
from django.db import transaction
from django.dispatch import receiver
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from receipts.ingest import health
from receipts.ingest.signals import Change

# The GenAI semantic conventions' operation for one agent handing work to another (the receiver is invoked).
GEN_AI_OPERATION = "invoke_agent"
OTLP_TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class HandoffSpan:
    """What one exported span says: ids, names, codes and times, copied while the change is being recorded."""

    handoff_id: str
    operation_id: str
    sender: str
    receiver: str
    route_version: str
    verdict: str
    previous_verdict: str
    boundary: str
    final_status: str
    cause: str
    started: datetime
    ended: datetime

    @property
    def name(self) -> str:
        return f"handoff {self.sender or '?'}→{self.receiver or '?'}"

    @property
    def failing(self) -> bool:
        return health.VERDICT_REASONS.get(self.verdict, ("",))[0] == health.FAILING

    def attributes(self) -> dict[str, str]:
        attributes = {
            "gen_ai.operation.name": GEN_AI_OPERATION,
            "gen_ai.agent.name": self.receiver,
            "sidewisp.handoff.id": self.handoff_id,
            "sidewisp.operation.id": self.operation_id,
            "sidewisp.handoff.sender": self.sender,
            "sidewisp.handoff.receiver": self.receiver,
            "sidewisp.handoff.route_version": self.route_version,
            "sidewisp.handoff.verdict": self.verdict,
            "sidewisp.handoff.previous_verdict": self.previous_verdict,
            "sidewisp.handoff.failing_boundary": self.boundary,
            "sidewisp.handoff.final_status": self.final_status,
            "sidewisp.handoff.cause": self.cause,
        }
        return {key: value for key, value in attributes.items() if value}


def trace_id_for(operation_id: str) -> int:
    """The 128-bit trace id of a run: the same for every span of its handoffs, in every process."""
    return int.from_bytes(hashlib.sha256(operation_id.encode()).digest()[:16], "big") or 1


def export_handoff_changes(sender, *, changes, **kwargs) -> None:
    """The `handoffs_changed` receiver: a span for each verdict change or settlement, after commit."""
    tracer = _exporting.tracer()
    if tracer is None:
        return
    spans = [span for change in changes if (span := _span_of(change)) is not None]
    if spans:
        transaction.on_commit(partial(_emit_all, tracer, spans), robust=True)


def _span_of(change: Change) -> HandoffSpan | None:
    handoff, after, before, now = change.handoff, change.after, change.before, change.now
    if not after.final:
        return None  # not yet a verdict: no span, and never an error span for "not yet"
    # The previous verdict that was exported: one in progress never was.
    previous = before.verdict if before is not None and before.final else ""
    if previous == after.verdict and change.cause not in health.SETTLEMENT_CAUSES:
        return None
    return HandoffSpan(
        handoff_id=handoff.handoff_id,
        operation_id=handoff.run.operation_id,
        sender=handoff.sender,
        receiver=handoff.receiver,
        route_version=handoff.route_version,
        verdict=handoff.verdict,
        previous_verdict=previous,
        boundary=handoff.boundary,
        final_status=handoff.final_status,
        cause=change.cause,
        started=min(handoff.created_at, now),
        ended=now,
    )


def _emit_all(tracer: trace.Tracer, spans: list[HandoffSpan]) -> None:
    for span in spans:
        _emit(tracer, span)


def _emit(tracer: trace.Tracer, span: HandoffSpan) -> None:
    token = _RUN_TRACE_ID.set(trace_id_for(span.operation_id))
    try:
        otel_span = tracer.start_span(span.name, attributes=span.attributes(), start_time=_nanoseconds(span.started))
    finally:
        _RUN_TRACE_ID.reset(token)
    if span.failing:
        otel_span.set_status(trace.Status(trace.StatusCode.ERROR, span.verdict))
    otel_span.end(end_time=_nanoseconds(span.ended))


def _nanoseconds(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


# The trace id `_emit` derived for the span it is starting (a context variable: threads export at once).
_RUN_TRACE_ID: ContextVar[int | None] = ContextVar("sidewisp_run_trace_id", default=None)


class _RunTraceIds(RandomIdGenerator):
    """Span ids at random; trace ids from the run being exported (`_emit` is the only caller of this provider)."""

    def generate_trace_id(self) -> int:
        return _RUN_TRACE_ID.get() or super().generate_trace_id()


class _Exporting:
    """This process's tracer provider: built from the settings at first use, or started with an exporter."""

    def __init__(self) -> None:
        self.provider: TracerProvider | None = None
        self.loaded = False
        self.lock = threading.Lock()  # recording threads of one process may all export at once

    def tracer(self) -> trace.Tracer | None:
        with self.lock:
            if not self.loaded and settings.SIDEWISP_OTLP_ENDPOINT:
                self._start(BatchSpanProcessor(_otlp_exporter()))
            self.loaded = True
            provider = self.provider
        return provider.get_tracer(__name__) if provider else None

    def start(self, processor: SpanProcessor) -> TracerProvider:
        with self.lock:
            self._stop()
            return self._start(processor)

    def stop(self) -> None:
        """Flush what is queued and shut down; the next export reads the settings again."""
        with self.lock:
            self._stop()

    def _start(self, processor: SpanProcessor) -> TracerProvider:
        # Sidewisp's own provider, never the global one: the process may host a user's graph with its own tracing.
        self.provider = TracerProvider(
            sampler=ALWAYS_ON,
            resource=Resource.create({"service.name": settings.SIDEWISP_OTLP_SERVICE_NAME}),
            id_generator=_RunTraceIds(),
        )
        self.provider.add_span_processor(processor)
        self.loaded = True
        return self.provider

    def _stop(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()
        self.provider = None
        self.loaded = False


_exporting = _Exporting()


def start(processor: SpanProcessor) -> TracerProvider:
    """Export through `processor` from now on, whatever the settings say (tests give an in-memory exporter)."""
    return _exporting.start(processor)


def stop() -> None:
    _exporting.stop()


def _otlp_exporter() -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=traces_url(settings.SIDEWISP_OTLP_ENDPOINT),
        headers=settings.SIDEWISP_OTLP_HEADERS,
        timeout=settings.SIDEWISP_OTLP_TIMEOUT,
    )


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL: `endpoint` as given, or with /v1/traces added to a bare collector address."""
    return endpoint.rstrip("/") + OTLP_TRACES_PATH if urlsplit(endpoint).path in ("", "/") else endpoint


@receiver(setting_changed)
def _settings_changed(setting: str, **kwargs) -> None:
    if setting.startswith("SIDEWISP_OTLP_"):
        stop()
