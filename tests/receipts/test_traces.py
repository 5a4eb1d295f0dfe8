"""OTLP trace export: a span per handoff verdict change, names and codes only, and nothing unless configured."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from receipts.ingest.recording import note_settlement
from receipts.models import Handoff, Run
from receipts.notify import traces
from sidewisp.ops.env import env_headers
from tests.conftest import handoff_parts, record_wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_export_left_behind() -> Iterator[None]:
    traces.stop()
    yield
    traces.stop()


@pytest.fixture
def exported() -> InMemorySpanExporter:
    """Spans go to memory, synchronously, as each change commits."""
    exporter = InMemorySpanExporter()
    traces.start(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def record_committed(record_handoff, django_capture_on_commit_callbacks):
    """record_handoff, with its after-commit work run as a real commit would run it."""

    def _record(*args, **kwargs) -> Handoff:
        with django_capture_on_commit_callbacks(execute=True):
            return record_handoff(*args, **kwargs)

    return _record


def attributes(span) -> dict:
    return dict(span.attributes)


def ended_run(operation_id: str) -> Run:
    """A run that has ended: every handoff recorded for it is settled, so each verdict it gets is final at once
    (spec v1.2 Settled; an unsettled one in progress exports nothing: test_settled.py)."""
    return Run.objects.create(operation_id=operation_id, thread_id=operation_id, status=Run.Status.COMPLETE)


def test_a_verdict_change_is_a_span_with_the_handoffs_names_codes_and_times(exported, record_committed):
    ended_run("op-1")
    handoff = record_committed("h-1", "op-1", "healthy")

    last = exported.get_finished_spans()[-1]
    assert last.name == "handoff triage→sales"
    assert attributes(last) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "sales",
        "sidewisp.handoff.id": "h-1",
        "sidewisp.operation.id": "op-1",
        "sidewisp.handoff.sender": "triage",
        "sidewisp.handoff.receiver": "sales",
        "sidewisp.handoff.route_version": "routes/1",
        "sidewisp.handoff.verdict": "HEALTHY",
        "sidewisp.handoff.previous_verdict": "DESTINATION_NOT_STARTED",
        "sidewisp.handoff.cause": "destination",
    }
    assert last.start_time == int(handoff.created_at.timestamp() * 1e9)
    assert last.end_time == int(handoff.verdict_changes.last().at.timestamp() * 1e9)
    assert last.status.status_code == StatusCode.UNSET


def test_each_verdict_change_is_one_span(exported, record_committed):
    ended_run("op-1")
    handoff = record_committed("h-1", "op-1", "healthy")

    verdicts = [attributes(span)["sidewisp.handoff.verdict"] for span in exported.get_finished_spans()]
    assert verdicts == list(handoff.verdict_changes.values_list("verdict", flat=True))


def test_a_failing_verdict_names_its_boundary_and_marks_the_span_as_an_error(exported, record_committed):
    record_committed("h-1", "op-1", "stale_control")

    last = exported.get_finished_spans()[-1]
    assert attributes(last)["sidewisp.handoff.verdict"] == "STALE_CONTROL"
    assert attributes(last)["sidewisp.handoff.failing_boundary"] == "control"
    assert last.status.status_code == StatusCode.ERROR
    assert last.status.description == "STALE_CONTROL"


def test_the_handoffs_of_one_run_share_a_trace_derived_from_its_operation_id(exported, record_committed):
    record_committed("h-1", "op-1", "healthy")
    record_committed("h-2", "op-1", "waiting")
    record_committed("h-3", "op-2", "healthy")

    trace_ids = {
        attributes(span)["sidewisp.handoff.id"]: span.context.trace_id for span in exported.get_finished_spans()
    }
    assert trace_ids["h-1"] == trace_ids["h-2"] == traces.trace_id_for("op-1")
    assert trace_ids["h-3"] == traces.trace_id_for("op-2") != trace_ids["h-1"]
    assert len({span.context.span_id for span in exported.get_finished_spans()}) == len(exported.get_finished_spans())


def test_a_change_that_keeps_the_verdict_exports_nothing(
    exported, record_committed, django_capture_on_commit_callbacks
):
    handoff = record_committed("h-1", "op-1", "waiting")
    exported.clear()

    with django_capture_on_commit_callbacks(execute=True):
        record_wait_for(handoff, owner="ops-lead")

    assert exported.get_finished_spans() == ()


def test_an_operator_settlement_is_a_span_though_the_verdict_stays(
    exported, record_committed, django_capture_on_commit_callbacks
):
    handoff = record_committed("h-1", "op-1", "false_complete")
    exported.clear()

    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        note_settlement(Handoff.objects.get(pk=handoff.pk), "task.accept", timezone.now())

    (span,) = exported.get_finished_spans()
    assert attributes(span)["sidewisp.handoff.cause"] == "task.accept"
    assert attributes(span)["sidewisp.handoff.verdict"] == "FALSE_COMPLETE"


def test_a_rolled_back_recording_exports_nothing(exported, contracts, django_capture_on_commit_callbacks):
    from receipts.ingest.recording import record

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError), transaction.atomic():
        for part, value in handoff_parts("healthy"):
            record(handoff_id="h-1", operation_id="op-1", part=part, value=value)
        raise RuntimeError

    assert exported.get_finished_spans() == ()


def test_spans_carry_no_evidence_content(exported, record_committed):
    record_committed("h-1", "op-1", "waiting")
    record_committed("h-2", "op-1", "healthy")

    exported_text = json.dumps([json.loads(span.to_json()) for span in exported.get_finished_spans()])
    # Tool-call, attempt and receipt ids, the verifier, the wait's owner, reason and resume token, context key names.
    evidence = {"call_1", "a-1", "v-1", "order_exists", "viewer", "purchase_approval", "token-55d0"}
    evidence |= {"request_type", "customer_tier", "consent_status"}
    assert [content for content in evidence if content in exported_text] == []


# --- OTLP/HTTP to a collector on loopback -------------------------------------------------


@dataclass
class Collector:
    url: str
    requests: list[tuple[str, Message, ExportTraceServiceRequest]] = field(default_factory=list)

    def spans(self) -> list:
        return [
            (resource_spans.resource, span)
            for _, _, request in self.requests
            for resource_spans in request.resource_spans
            for scope_spans in resource_spans.scope_spans
            for span in scope_spans.spans
        ]


@pytest.fixture
def collector() -> Iterator[Collector]:
    """An OTLP/HTTP trace receiver on loopback that decodes what it is sent with the OTLP protobufs."""
    received = Collector(url="")

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.requests.append((self.path, self.headers, ExportTraceServiceRequest.FromString(body)))
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    received.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield received
    server.shutdown()
    server.server_close()


def test_the_spans_reach_an_otlp_collector_when_an_endpoint_is_set(settings, collector, record_committed):
    settings.SIDEWISP_OTLP_ENDPOINT = collector.url
    settings.SIDEWISP_OTLP_HEADERS = {"Authorization": "Bearer collector-key"}
    record_committed("h-1", "op-1", "false_complete")

    traces.stop()  # flushes the batch processor's queue

    (path, headers, _), *_ = collector.requests
    assert path == "/v1/traces"
    assert headers["Authorization"] == "Bearer collector-key"
    resource, span = collector.spans()[-1]
    assert {a.key: a.value.string_value for a in resource.attributes}["service.name"] == "sidewisp"
    assert span.name == "handoff triage→sales"
    assert span.trace_id == traces.trace_id_for("op-1").to_bytes(16, "big")
    span_attributes = {a.key: a.value.string_value for a in span.attributes}
    assert span_attributes["sidewisp.handoff.verdict"] == "FALSE_COMPLETE"
    assert span_attributes["gen_ai.agent.name"] == "sales"


def test_nothing_is_exported_without_an_endpoint(
    settings, collector, record_handoff, django_capture_on_commit_callbacks
):
    settings.SIDEWISP_OTLP_ENDPOINT = ""
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        record_handoff("h-1", "op-1", "false_complete")

    traces.stop()

    assert collector.requests == []
    assert not [callback for callback in callbacks if getattr(callback, "func", None) is traces._emit]


def test_a_collector_that_is_away_never_fails_recording(settings, record_committed):
    settings.SIDEWISP_OTLP_ENDPOINT = "http://127.0.0.1:1/v1/traces"
    settings.SIDEWISP_OTLP_TIMEOUT = 0.5

    handoff = record_committed("h-1", "op-1", "healthy")

    assert Handoff.objects.get(pk=handoff.pk).verdict == "HEALTHY"


def test_a_bare_collector_address_gets_the_traces_path():
    assert traces.traces_url("http://collector:4318") == "http://collector:4318/v1/traces"
    assert traces.traces_url("https://phoenix/v1/traces") == "https://phoenix/v1/traces"


def test_export_headers_are_url_decoded_and_a_bad_entry_is_named_without_its_value(monkeypatch):
    monkeypatch.setenv("SIDEWISP_OTLP_HEADERS", "Authorization=Basic%20c2VjcmV0,x-tenant=blue")
    assert env_headers("SIDEWISP_OTLP_HEADERS") == {"Authorization": "Basic c2VjcmV0", "x-tenant": "blue"}

    monkeypatch.setenv("SIDEWISP_OTLP_HEADERS", "x-tenant=blue,c2VjcmV0")
    with pytest.raises(ImproperlyConfigured, match="SIDEWISP_OTLP_HEADERS entry 2") as error:
        env_headers("SIDEWISP_OTLP_HEADERS")
    assert "c2VjcmV0" not in str(error.value)
