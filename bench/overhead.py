"""What observing an agent run costs the agent: Sidewisp beside two tracing peers, on one scripted run.

The run: two `create_agent` agents as nodes of one graph, scripted models;
`front` hands to `back` with `handoff_tool` (one context key), `back` looks
something up and answers. Measured in this process after a warm-up, the
variants interleaved run by run, so load from the rest of the machine falls on
all of them alike:

- bare: `graph.invoke`, nothing attached;
- Sidewisp: `SidewispMiddleware` last in both agents, driven by `observe`,
  recording to the database at DATABASE_URL (a throwaway test database);
- Sidewisp with the evidence writer's sink swapped for one that stores
  nothing: what observing costs apart from storing the receipts;
- OpenInference: `LangChainInstrumentor` to an in-memory span exporter;
- Langfuse: its LangChain `CallbackHandler`, spans to an in-memory exporter
  and the API pointed at a closed local port, so nothing leaves the machine.

The peers live in bench/requirements.txt (`make bench` installs them into
.venv-bench); without them their rows say so. New database connections are
counted with Django's `connection_created` signal (every thread's), SQL statements
by the thread that ran them (the evidence writer's, or the agent's side: the
caller's thread and LangGraph's), and the load average is printed before and
after the measurement.

    .venv-bench/bin/python -m bench.overhead [--quick | --profile RUNS | --profile-writer RUNS]
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import logging
import os
import pstats
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, NotRequired, TypedDict

from langchain.agents import create_agent
from langchain_core.messages import AnyMessage
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from bench.environment import setup_django, throwaway_database
from bench.sizes import pick
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
    return pick(quick, tiny=Sizes(runs=3, warmup=1), quick=Sizes(runs=20, warmup=3), full=Sizes(runs=200, warmup=20))


@dataclass
class Timing:
    """Wall-clock milliseconds of each run, and what each run left behind."""

    samples_ms: list[float]
    connections_per_run: float
    note: str = ""
    agent_statements_per_run: float = 0.0
    writer_statements_per_run: float = 0.0

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
    from sidewisp_agent.handoffs import handoff_tool
    from sidewisp_agent.middleware import SidewispMiddleware

    from agents.host.scripted import Call, Say, Script, ScriptedChatModel

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


def _verifier(operation_id: str) -> tuple[str, str, str]:
    return ("bench_answered", "pass", f"v-{operation_id}")


# --- measuring -------------------------------------------------------------------


@dataclass
class Variant:
    """One way of running the scripted run: `run(operation_id)`, inside `attached()` when it needs a global hook."""

    name: str
    run: Callable[[str], object]
    attached: Callable[[], AbstractContextManager] = nullcontext
    describe: Callable[[int], str] = lambda calls: ""  # a note on what its `calls` runs (warm-up too) left behind
    samples_ms: list[float] = field(default_factory=list)
    connections: int = 0
    calls: int = 0
    statements: Counter = field(default_factory=Counter)  # "agent" / "writer" -> SQL statements in measured runs

    def timing(self) -> Timing:
        runs = len(self.samples_ms)
        return Timing(
            self.samples_ms,
            self.connections / runs,
            self.describe(self.calls),
            self.statements["agent"] / runs,
            self.statements["writer"] / runs,
        )


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


WRITER_THREAD = "sidewisp-writer"


@contextmanager
def counting_statements() -> Iterator[Counter]:
    """Counts SQL statements while open, by who ran them: the evidence writer's thread or the agent's side."""
    from django.db.backends import utils

    counts: Counter = Counter()
    execute, executemany = utils.CursorWrapper.execute, utils.CursorWrapper.executemany

    def side() -> str:
        return "writer" if threading.current_thread().name == WRITER_THREAD else "agent"

    def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[side()] += 1
        return execute(self, *args, **kwargs)

    def counted_executemany(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[side()] += 1
        return executemany(self, *args, **kwargs)

    utils.CursorWrapper.execute, utils.CursorWrapper.executemany = counted_execute, counted_executemany
    try:
        yield counts
    finally:
        utils.CursorWrapper.execute, utils.CursorWrapper.executemany = execute, executemany


def measure(variants: list[Variant], size: Sizes) -> None:
    """Round-robin over the variants, so load from the rest of the machine falls on all of them alike.

    A run's statements are counted from its start to the start of the next variant's run: what its writer
    stores after `observe` returned is counted with it.
    """
    with counting_connections() as opened, counting_statements() as statements:
        for i in range(size.warmup + size.runs):
            for variant in variants:
                with variant.attached():
                    before, counted = opened[0], statements.copy()
                    start = time.perf_counter()
                    variant.run(f"op-bench-{variant.name}-{i}")
                    elapsed = (time.perf_counter() - start) * 1000
                    _settle()
                variant.calls += 1
                if i >= size.warmup:
                    variant.samples_ms.append(elapsed)
                    variant.connections += opened[0] - before
                    variant.statements.update(statements - counted)


def _settle() -> None:
    # Outside the timed window: what a variant left in the evidence writer is written before the next one runs.
    from agents.observe import writer

    writer.flush()


def _config(operation_id: str, **extra: Any) -> dict:
    return {"configurable": {"thread_id": operation_id, "operation_id": operation_id}, **extra}


def bare(size: Sizes) -> Variant:
    graph = build_graph(observed=False)
    answer = graph.invoke(INPUT, _config("op-bench-check"))["messages"][-1].content
    return Variant(
        "bare",
        lambda operation_id: graph.invoke(INPUT, _config(operation_id)),
        describe=lambda calls: (
            f"n={size.runs} after {size.warmup} warm-up runs, variants interleaved; "
            f"ends with the back agent's answer ({answer!r})"
        ),
    )


def sidewisp(graph: Any) -> Variant:
    from receipts.models import Handoff, Receipt

    def describe(calls: int) -> str:
        handoffs = Handoff.objects.filter(run__operation_id__startswith="op-bench-sidewisp-")
        verdicts = sorted(set(handoffs.values_list("verdict", flat=True)))
        receipts = Receipt.objects.filter(handoff__in=handoffs).count() / handoffs.count() if handoffs else 0
        return f"{receipts:.1f} receipts per run; verdicts {', '.join(verdicts) or 'none recorded'}"

    return Variant("sidewisp", partial(_observe, graph, expect="complete"), describe=describe)


class DiscardingSink:
    """An evidence-writer sink that takes every batch and stores nothing."""

    def write(self, entries: Any) -> None:
        return None


def sidewisp_unwritten(graph: Any) -> Variant | None:
    """The Sidewisp variant with the evidence writer's sink swapped for one that stores nothing.

    What it still costs is observation itself and what `observe` reads and writes outside the
    writer (the run's status); the difference to the Sidewisp row is writing the receipts.
    """
    try:
        from agents.observe import writer
    except ImportError:
        return None
    if not hasattr(writer, "get") or not hasattr(writer.get(), "sink"):
        return None

    @contextmanager
    def discarding() -> Iterator[None]:
        # The same writer thread and connection: only where its batches go changes, between flushes.
        this_process = writer.get()
        writer.flush()
        stores, this_process.sink = this_process.sink, DiscardingSink()
        try:
            yield
        finally:
            writer.flush()
            this_process.sink = stores

    return Variant("sidewisp-unwritten", partial(_observe, graph, expect=None), discarding)


def _observe(graph: Any, operation_id: str, *, expect: str | None) -> None:
    from sidewisp_agent.observer import observe

    outcome = observe(graph, INPUT, _config(operation_id), verifier=_verifier)
    if expect is not None and outcome.status != expect:
        msg = f"the observed run ended {outcome.status}"
        raise RuntimeError(msg)


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def openinference() -> Variant | None:
    if not installed("openinference.instrumentation.langchain"):
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

    @contextmanager
    def instrumented() -> Iterator[None]:
        # The instrumentor hooks every LangChain callback manager in the process: on only for its own runs.
        instrumentor.instrument(tracer_provider=provider)
        try:
            yield
        finally:
            instrumentor.uninstrument()

    def describe(calls: int) -> str:
        spans = len(exporter.get_finished_spans())
        return f"SimpleSpanProcessor to InMemorySpanExporter; {spans / calls:.0f} spans per run"

    return Variant("openinference", lambda op: graph.invoke(INPUT, _config(op)), instrumented, describe)


def langfuse() -> Variant | None:
    if not installed("langfuse"):
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

    def describe(calls: int) -> str:
        client.flush()  # the batch processor's queue into the in-memory exporter
        spans = len(exporter.get_finished_spans())
        return (
            "its BatchSpanProcessor to InMemorySpanExporter, API at a closed local port; "
            f"{spans / calls:.0f} spans per run"
        )

    return Variant("langfuse", lambda op: graph.invoke(INPUT, _config(op, callbacks=[handler])), describe=describe)


# --- the rows ------------------------------------------------------------------------


def _figure(timing: Timing, baseline: Timing | None) -> str:
    figure = f"median {timing.median:.1f} ms, p95 {timing.p95:.1f} ms"
    if baseline is not None:
        extra = timing.median - baseline.median
        figure += f"; overhead {extra:+.1f} ms = {TIMES}{extra / baseline.median:.2f} of bare"
    return figure


def _overhead(timing: Timing, baseline: Timing) -> float:
    return (timing.median - baseline.median) / baseline.median


def _to_peers(timing: Timing, baseline: Timing, peers: dict[str, Timing]) -> str:
    """Sidewisp's overhead as a multiple of each peer's, measured in the same run ("" without peers)."""
    parts = []
    for name, peer in peers.items():
        extra = peer.median - baseline.median
        if extra > 0:
            parts.append(f"{TIMES}{(timing.median - baseline.median) / extra:.2f} of {name.split()[0]}'s overhead")
    return f" ({', '.join(parts)})" if parts else ""


def load_average() -> str:
    return "/".join(f"{load:.2f}" for load in os.getloadavg())


def rows(quick: bool) -> list[Row]:
    setup_django()
    size = sizes(quick)
    load_before = load_average()
    peers = {"OpenInference LangChainInstrumentor": openinference(), "Langfuse LangChain CallbackHandler": langfuse()}
    with throwaway_database():
        from receipts.models import ContractVersion

        ContractVersion.objects.get_or_create(version=ROUTE_VERSION, defaults={"routes": ROUTES})
        observed = build_graph(observed=True)
        base, ours, unwritten = bare(size), sidewisp(observed), sidewisp_unwritten(observed)
        measure([v for v in (base, ours, unwritten, *peers.values()) if v is not None], size)
        base_t, ours_t = base.timing(), ours.timing()
        unwritten_t = unwritten.timing() if unwritten is not None else None
        peer_t = {name: peer.timing() for name, peer in peers.items() if peer is not None}
    load_after = load_average()
    best = min(((name, _overhead(t, base_t)) for name, t in peer_t.items()), key=lambda item: item[1], default=None)
    goal = "no worse than the best peer"
    if best is not None:
        goal += f" ({TIMES}{best[1]:.2f}, {best[0].split()[0]})"
    what = "scripted two-agent handoff run"
    load = f"load average (1/5/15 min) {load_before} before, {load_after} after"
    result = [
        Row("overhead", f"{what}, bare", _figure(base_t, None), "—", f"{base_t.note}; {load}"),
        Row(
            "overhead",
            f"{what} with SidewispMiddleware + observe recording to the database",
            f"{_figure(ours_t, base_t)}{_to_peers(ours_t, base_t, peer_t)}; "
            f"{ours_t.connections_per_run:.2f} new DB connections per run; SQL statements per run: "
            f"{ours_t.agent_statements_per_run:.1f} on the agent's side, {ours_t.writer_statements_per_run:.1f} "
            "on the evidence writer's thread",
            goal,
            ours_t.note,
        ),
        Row(
            "overhead",
            f"{what} with Sidewisp, receipts handed to the evidence writer but not stored (its sink discards them)",
            _figure(unwritten_t, base_t) if unwritten_t else "not measured (agents.observe.writer has no sink to swap)",
            "—",
            "what is left is observation and observe's own run-status work; "
            "the rest of the Sidewisp row's overhead is storing the receipts",
        ),
    ]
    for name in peers:
        if name in peer_t:
            result.append(
                Row("overhead", f"{what} with {name}", _figure(peer_t[name], base_t), "peer", peer_t[name].note)
            )
        else:
            result.append(Row("overhead", f"{what} with {name}", NOT_INSTALLED, "peer"))
    return result


def profile(runs: int) -> None:
    """cProfile of `runs` Sidewisp runs (after a warm-up), the 30 costliest calls by cumulative time."""
    setup_django()
    with throwaway_database():
        from receipts.models import ContractVersion

        ContractVersion.objects.get_or_create(version=ROUTE_VERSION, defaults={"routes": ROUTES})
        variant = sidewisp(build_graph(observed=True))
        for i in range(5):
            variant.run(f"op-bench-sidewisp-warm-{i}")
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [variant.run(f"op-bench-sidewisp-{i}") for i in range(runs)])
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


class CapturingSink:
    """An evidence-writer sink that keeps every batch it is given (and stores nothing)."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def write(self, entries: Any) -> None:
        self.batches.append(list(entries))


def profile_writer(runs: int) -> None:
    """cProfile of what the evidence writer does to store `runs` Sidewisp runs, on this thread.

    One observed run's batches are captured as the writer cut them, then written again `runs` times under
    fresh operation, thread and handoff ids with the local sink, as the writer's thread writes them.
    """
    import dataclasses

    setup_django()
    with throwaway_database():
        from agents.observe import writer
        from receipts.models import ContractVersion

        ContractVersion.objects.get_or_create(version=ROUTE_VERSION, defaults={"routes": ROUTES})
        graph, capture = build_graph(observed=True), CapturingSink()
        this_process = writer.get()
        writer.flush()
        stores, this_process.sink = this_process.sink, capture
        _observe(graph, "op-bench-captured", expect=None)
        this_process.sink = stores

        def renamed(entry: Any, i: int) -> Any:
            entry = dataclasses.replace(entry, operation_id=f"op-bench-writer-{i}")
            if getattr(entry, "thread_id", None):
                entry = dataclasses.replace(entry, thread_id=f"op-bench-writer-{i}")
            if getattr(entry, "handoff_id", None):
                entry = dataclasses.replace(entry, handoff_id=f"{entry.handoff_id}-{i}")
            return entry

        sink, profiler = writer.LocalSink(), cProfile.Profile()
        print(f"one run's batches: {[len(batch) for batch in capture.batches]} entries")
        with counting_statements() as statements:
            start = time.perf_counter()
            profiler.runcall(
                lambda: [sink.write([renamed(e, i) for e in batch]) for i in range(runs) for batch in capture.batches]
            )
            elapsed = time.perf_counter() - start
        print(f"per run: {elapsed / runs * 1000:.1f} ms, {sum(statements.values()) / runs:.1f} SQL statements")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20 runs per variant instead of 200")
    parser.add_argument("--profile", type=int, metavar="RUNS", help="profile RUNS Sidewisp runs instead")
    parser.add_argument(
        "--profile-writer", type=int, metavar="RUNS", help="profile the evidence writer storing RUNS runs instead"
    )
    args = parser.parse_args()
    if args.profile_writer:
        profile_writer(args.profile_writer)
    elif args.profile:
        profile(args.profile)
    else:
        print(markdown(rows(args.quick)))


if __name__ == "__main__":
    main()
