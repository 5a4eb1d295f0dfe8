"""The caller's side of `observe.stream`: the chunks `graph.stream` would give, and the streams that carry them."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from langgraph.pregel._messages import StreamMessagesHandler, graph_namespace

from .outcomes import Ended, Outcome
from .toolevents import with_handler


@dataclass
class UserStream:
    """The stream the caller of `observe.stream` asked for, given as `graph.stream` would give it.

    LangGraph is always asked for the observer's modes with subgraphs; the caller gets only their own
    modes, below the root graph only with `subgraphs=True`, shaped by `version` and by whether
    `stream_mode` was a list. `messages` without subgraphs comes from a handler of its own (`_RootMessages`).
    """

    modes: frozenset[str] = frozenset()
    listed: bool = False
    subgraphs: bool = False
    version: str = "v1"
    kwargs: dict[str, Any] = field(default_factory=dict)
    graph: Any = None
    relay: deque | None = None

    @classmethod
    def asked(cls, graph: Any, stream_mode: Any, subgraphs: bool, version: str, kwargs: dict[str, Any]) -> UserStream:
        if stream_mode is None:
            stream_mode = getattr(graph, "stream_mode", "values")
        modes = frozenset([stream_mode] if isinstance(stream_mode, str) else stream_mode)
        relay = deque() if "messages" in modes and not subgraphs else None
        return cls(modes, isinstance(stream_mode, list), subgraphs, version, dict(kwargs), graph, relay)

    def configure(self, config: dict) -> dict:
        if self.relay is None:
            return config
        return {**config, "callbacks": with_handler(config.get("callbacks"), _RootMessages(self.relay.append))}

    def options(self, observer: dict[str, Any]) -> dict[str, Any]:
        # "messages" wakes the stream for each token of the relay. The observer's own tool events come
        # from `sidewisp_agent.toolevents`: asking for "tools" would stream every chat model of the run.
        modes = list(dict.fromkeys([*observer["stream_mode"], *sorted(self.modes)]))
        return {**self.kwargs, **observer, "stream_mode": modes, "subgraphs": True}

    def chunks(self, ns: tuple[str, ...] = (), mode: str | None = None, chunk: Any = None) -> list[Any]:
        shaped = []
        while self.relay:
            shaped.append(self._shape(*self.relay.popleft()))
        relayed = mode == "messages" and self.relay is not None
        if mode in self.modes and (self.subgraphs or not ns) and not relayed:
            shaped.append(self._shape(ns, mode, chunk))
        return shaped

    def _shape(self, ns: tuple[str, ...], mode: str, chunk: Any) -> Any:
        if self.version == "v2":
            return _v2_part(self.graph, ns, mode, chunk)
        if self.listed:
            return (ns, mode, chunk) if self.subgraphs else (mode, chunk)
        return (ns, chunk) if self.subgraphs else chunk


def _v2_part(graph: Any, ns: tuple[str, ...], mode: str, chunk: Any) -> dict[str, Any]:
    """A `version="v2"` stream part, as LangGraph makes it (state coerced to the graph's schema)."""
    if mode == "values":
        interrupts: tuple = ()
        if isinstance(chunk, dict):
            chunk = dict(chunk)
            interrupts = chunk.pop("__interrupt__", ())
            if (mapper := getattr(graph, "_output_mapper", None)) is not None:
                chunk = mapper(chunk)
        return {"type": mode, "ns": ns, "data": chunk, "interrupts": interrupts}
    if mode in ("checkpoints", "debug") and (mapper := getattr(graph, "_state_mapper", None)) is not None:
        chunk = _coerced(chunk, mapper)
    return {"type": mode, "ns": ns, "data": chunk}


def _coerced(payload: Any, mapper: Callable[[Any], Any]) -> Any:
    if not isinstance(payload, dict):
        return payload
    if payload.get("type") == "checkpoint" and isinstance(payload.get("payload"), dict):
        return {**payload, "payload": _coerced(payload["payload"], mapper)}
    if isinstance(payload.get("values"), dict) and "__start__" not in payload.get("next", ()):
        return {**payload, "values": mapper(payload["values"])}
    return payload


class _RootMessages(StreamMessagesHandler):
    """LangGraph's `messages` handler as `graph.stream(..., subgraphs=False)` attaches it.

    The observer streams subgraphs; LangGraph's own handler would then drop the root nodes' messages
    that a subgraph streamed already (a swarm's final answer would never reach the caller). This one
    ignores every call below the root graph, and says it streams subgraphs only because LangGraph
    removes a caller's handler that does not.
    """

    def __init__(self, put: Callable[[Any], None]) -> None:
        super().__init__(put, subgraphs=True)

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any, **kwargs: Any) -> Any:
        if _below_root(kwargs.get("metadata")):
            return None
        return super().on_chat_model_start(serialized, messages, run_id=run_id, **kwargs)

    def on_chain_start(self, serialized: Any, inputs: Any, *, run_id: Any, **kwargs: Any) -> Any:
        if _below_root(kwargs.get("metadata")):
            return None
        return super().on_chain_start(serialized, inputs, run_id=run_id, **kwargs)


def _below_root(metadata: Mapping[str, Any] | None) -> bool:
    return bool(metadata and metadata.get("langgraph_checkpoint_ns") and graph_namespace(metadata))


class ObservedStream(Iterator[Any]):
    """The caller's chunks of an observed run; `outcome` once it ended (also its StopIteration value)."""

    def __init__(self, chunks: Generator[Any, None, Outcome]) -> None:
        self._chunks = chunks
        self.outcome: Outcome | None = None

    def __iter__(self) -> ObservedStream:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._chunks)
        except StopIteration as stop:
            self.outcome = stop.value
            raise

    def close(self) -> None:
        """Stop the run where it is (recorded as failed with `StreamClosed`), as closing `graph.stream` would."""
        self._chunks.close()


class AsyncObservedStream(AsyncIterator[Any]):
    """The async twin of `ObservedStream`: `outcome` once the run ended."""

    def __init__(self, chunks: AsyncGenerator[Any, None], ended: Ended) -> None:
        self._chunks = chunks
        self._ended = ended

    @property
    def outcome(self) -> Outcome | None:
        return self._ended.outcome

    def __aiter__(self) -> AsyncObservedStream:
        return self

    async def __anext__(self) -> Any:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._chunks.aclose()
