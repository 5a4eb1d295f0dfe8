"""What observing an agent run costs the agent: Sidewisp beside two tracing peers, on one scripted run.

The run: two `create_agent` agents as nodes of one graph, scripted models;
`front` hands to `back` with `handoff_tool` (one context key), `back` looks
something up and answers. Measured in this process, one variant after the
other, each after a warm-up:

- bare: `graph.invoke`, nothing attached;
- Sidewisp: `SidewispMiddleware` last in both agents, driven by `observe`,
  recording to the database at DATABASE_URL (a throwaway test database);
- OpenInference: `LangChainInstrumentor` to an in-memory span exporter;
- Langfuse: its LangChain `CallbackHandler`, spans to an in-memory exporter
  and the API pointed at a closed local port, so nothing leaves the machine.

The peers live in bench/requirements.txt (`make bench` installs them into
.venv-bench); without them their rows say so. New database connections are
counted with Django's `connection_created` signal (every thread's).

    .venv-bench/bin/python -m bench.overhead [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents import create_agent
from langchain_core.messages import AnyMessage
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from bench.environment import setup_django, throwaway_database
from bench.table import Row, markdown

ROUTE_VERSION = "bench/1"
ROUTES = {"front": {"back": ["topic"]}}
INPUT = {"messages": [{"role": "user", "content": "Where is my invoice?"}]}
NOT_INSTALLED = "not installed (make bench installs it)"
TIMES = "\u00d7"  # the multiplication sign


@dataclass(frozen=True)
class Sizes:
    runs: int
    warmup: int


def sizes(quick: bool) -> Sizes:
    return Sizes(runs=30, warmup=5) if quick else Sizes(runs=200, warmup=20)


@dataclass
class Timing:
    """Wall-clock milliseconds of each run, and what each run left behind."""

    samples_ms: list[float]
    connections_per_run: float
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def p95(self) -> float:
        ordered = sorted(self.samples_ms)
        return ordered[min(len(ordered) - 1, round(0.95 * len(ordered)) - 1)]


# --- the scripted two-agent run ----------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    active_agent: NotRequired[str]
    topic: NotRequired[str]


@tool
def lookup(query: str) -> str:
    """Look something up."""
    return "found"


def build_graph(*, observed: bool) -> Any:
    """front → back over `handoff_tool`; with `observed`, SidewispMiddleware is each agent's (last) middleware."""
    # Imported here: the agents package needs Django set up first.
    from agents.handoffs import handoff_tool
    from agents.middleware import SidewispMiddleware
    from agents.scripted import Call, Say, Script, ScriptedChatModel

    def middleware(name: str) -> list:
        return [SidewispMiddleware(agent=name, route_version=ROUTE_VERSION)] if observed else []

    front = create_agent(
        ScriptedChatModel(policy=Script((Call("transfer_to_back", {"topic": "billing"}),))),
        tools=[handoff_tool("back", ["topic"])],
        middleware=middleware("front"),
        name="front",
    )
    back = create_agent(
        ScriptedChatModel(policy=Script((Call("lookup", {"query": "invoice"}), Say("Your invoice is on its way.")))),
        tools=[lookup],
        middleware=middleware("back"),
        name="back",
    )
    builder = StateGraph(State)
    builder.add_node("front", front, destinations=("back",))
    builder.add_node("back", back)
    builder.add_edge(START, "front")
    return builder.compile()


def _config(variant: str, i: int, **extra: Any) -> dict:
    operation_id = f"op-bench-{variant}-{i}"
    return {"configurable": {"thread_id": operation_id, "operation_id": operation_id}, **extra}


def _verifier(operation_id: str) -> tuple[str, str, str]:
    return ("bench_answered", "pass", f"v-{operation_id}")


# --- measuring -------------------------------------------------------------------


@contextmanager
def counting_connections() -> Iterator[list[int]]:
    """Counts new database connections (any thread) while open: `count[0]`."""
    from django.db.backends.signals import connection_created

    count = [0]

    def opened(**kwargs: Any) -> None:
        count[0] += 1

    connection_created.connect(opened, weak=False)
    try:
        yield count
    finally:
        connection_created.disconnect(opened)


def measure(run: Callable[[str, int], object], variant: str, size: Sizes) -> Timing:
    for i in range(size.warmup):
        run(variant, -1 - i)
    samples = []
    with counting_connections() as opened:
        for i in range(size.runs):
            start = time.perf_counter()
            run(variant, i)
            samples.append((time.perf_counter() - start) * 1000)
    return Timing(samples, opened[0] / size.runs)


def bare(size: Sizes) -> Timing:
    graph = build_graph(observed=False)
    answer = graph.invoke(INPUT, _config("check", 0))["messages"][-1].content
    timing = measure(lambda variant, i: graph.invoke(INPUT, _config(variant, i)), "bare", size)
    timing.note = f"ends with the back agent's answer ({answer!r})"
    return timing


def sidewisp(size: Sizes) -> Timing:
    from agents.observer import observe
    from receipts.models import ContractVersion, Handoff, Receipt

    ContractVersion.objects.get_or_create(version=ROUTE_VERSION, defaults={"routes": ROUTES})
    graph = build_graph(observed=True)

    def run(variant: str, i: int) -> None:
        outcome = observe(graph, INPUT, _config(variant, i), verifier=_verifier)
        if outcome.status != "complete":
            msg = f"the observed run ended {outcome.status}"
            raise RuntimeError(msg)

    timing = measure(run, "sidewisp", size)
    measured = Handoff.objects.filter(run__operation_id__startswith="op-bench-sidewisp-")
    verdicts = sorted(set(measured.values_list("verdict", flat=True)))
    receipts = Receipt.objects.filter(handoff__in=measured).count()
    timing.note = f"{receipts / size.runs:.1f} receipts per run; verdicts {', '.join(verdicts) or 'none recorded'}"
    return timing


def openinference(size: Sizes) -> Timing | None:
    if importlib.util.find_spec("openinference.instrumentation.langchain") is None:
        return None
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    graph = build_graph(observed=False)
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        timing = measure(lambda variant, i: graph.invoke(INPUT, _config(variant, i)), "openinference", size)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
    spans = len(exporter.get_finished_spans())
    timing.note = f"SimpleSpanProcessor to InMemorySpanExporter; {spans / (size.runs + size.warmup):.0f} spans per run"
    return timing


def langfuse(size: Sizes) -> Timing | None:
    if importlib.util.find_spec("langfuse") is None:
        return None
    from langfuse import Langfuse
    from langfuse.langchain import CallbackHandler
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    client = Langfuse(
        public_key="pk-lf-bench",
        secret_key="sk-lf-bench",  # a placeholder: nothing is sent anywhere
        base_url="http://127.0.0.1:9",  # the discard port, closed: any API call would fail fast, locally
        tracer_provider=TracerProvider(),
        span_exporter=exporter,
    )
    handler = CallbackHandler(public_key="pk-lf-bench")
    graph = build_graph(observed=False)
    # It warns on every run that the scripted model has no model name it knows.
    logging.getLogger("langfuse").setLevel(logging.ERROR)
    try:
        timing = measure(
            lambda variant, i: graph.invoke(INPUT, _config(variant, i, callbacks=[handler])), "langfuse", size
        )
    finally:
        client.shutdown()  # flushes the batch processor into the in-memory exporter
    spans = len(exporter.get_finished_spans())
    timing.note = (
        f"its BatchSpanProcessor to InMemorySpanExporter, API at a closed local port; "
        f"{spans / (size.runs + size.warmup):.0f} spans per run"
    )
    return timing


# --- the rows ------------------------------------------------------------------------


def _figure(timing: Timing, baseline: Timing | None) -> str:
    figure = f"median {timing.median:.1f} ms, p95 {timing.p95:.1f} ms"
    if baseline is not None:
        extra = timing.median - baseline.median
        figure += f"; overhead +{extra:.1f} ms = {TIMES}{extra / baseline.median:.2f} of bare"
    return figure


def _overhead(timing: Timing | None, baseline: Timing) -> float | None:
    return None if timing is None else (timing.median - baseline.median) / baseline.median


def rows(quick: bool) -> list[Row]:
    setup_django()
    size = sizes(quick)
    with throwaway_database():
        base = bare(size)
        ours = sidewisp(size)
    peers = {
        "OpenInference LangChainInstrumentor": openinference(size),
        "Langfuse LangChain CallbackHandler": langfuse(size),
    }
    measured = {name: _overhead(t, base) for name, t in peers.items() if t is not None}
    best = min(measured.items(), key=lambda item: item[1], default=None)
    goal = "no worse than the best peer"
    if best is not None:
        goal += f" ({TIMES}{best[1]:.2f}, {best[0].split()[0]})"
    what = "scripted two-agent handoff run"
    result = [
        Row("overhead", f"{what}, bare", _figure(base, None), "—", f"n={size.runs}; {base.note}"),
        Row(
            "overhead",
            f"{what} with SidewispMiddleware + observe recording to the database",
            f"{_figure(ours, base)}; {ours.connections_per_run:.2f} new DB connections per run",
            goal,
            ours.note,
        ),
    ]
    for name, timing in peers.items():
        if timing is None:
            result.append(Row("overhead", f"{what} with {name}", NOT_INSTALLED, "peer"))
        else:
            result.append(Row("overhead", f"{what} with {name}", _figure(timing, base), "peer", timing.note))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="30 runs per variant instead of 200")
    print(markdown(rows(parser.parse_args().quick)))


if __name__ == "__main__":
    main()
