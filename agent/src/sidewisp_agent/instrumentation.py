"""Zero-code instrumentation: `instrument()` observes every LangGraph graph the process runs, `uninstrument()` stops.

As OpenInference's `LangChainInstrumentor().instrument()` does for tracing, one call at start-up, and the
user's code stays as it is:

- **Every compiled graph** (`langgraph.pregel.Pregel`, which `CompiledStateGraph` and `create_agent`'s
  agents are) is observed when it is run at the top: `Pregel.stream` and `Pregel.astream` are replaced
  at class level by versions that run the graph through `observe.stream` / `aobserve.astream`.
  `invoke`, `ainvoke`, `batch` and `astream_events` of a graph all stream through those two methods
  (LangGraph's own `invoke` builds its return value from `self.stream`), so they are observed too and
  the value they return is the one LangGraph builds from the same chunks.
- **Every `create_agent` agent built after the call** carries one `SidewispMiddleware` (last in its
  list, innermost, as the middleware asks), unless the user's list holds one already. The transfers
  it announces to the observer stay out of the caller's `custom` stream, which never had them.

A run is observed once. Inside an observed run (a context variable set while the run's stream
advances; LangGraph copies it into the threads and tasks of the run), and inside any LangGraph task
(a graph run as a node, or invoked from a node or a tool, is part of the outer run: its events
already reach the outer observer), and for the graph `observe()` itself streams (its config carries
the observer's mark), the original method runs untouched.

The run's operation id comes from the config the user passes, as `observe` reads it:
`configurable.operation_id`, else `configurable.thread_id` (values bound with `graph.with_config` count),
else a fresh `instrumented-<32 hex>` for that one call (a graph without a checkpointer is often
run without a thread id: each such call is a run of its own).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain.agents import factory
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.config import get_config
from langgraph.pregel import Pregel

from .evidence import operation_id_of
from .middleware import OBSERVED_KEY, SidewispMiddleware
from .observer import aobserve, observe
from .outcomes import Verifier, WaitPolicy
from .transfers import HANDOFF_EVENT

# True while an observed run's stream advances: the graphs run meanwhile are part of that run.
_INSIDE_OBSERVED_RUN: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sidewisp_inside_observed_run", default=False
)
# The configurable key LangGraph gives every task it runs (langgraph._internal._constants.CONFIG_KEY_TASK_ID).
_TASK_KEY = "__pregel_task_id"
_FRESH_PREFIX = "instrumented-"
_MODULE_PLACEHOLDER = "__sidewisp_instrumentation_module__"


@dataclass
class _Installed:
    """What `instrument()` replaced, to put back exactly, and what every observed run is given."""

    stream: Any
    astream: Any
    create_agent_code: Any
    create_agent_twin: Any = None  # a function of the original code: what the equipped create_agent calls
    observing: dict[str, Any] = field(default_factory=dict)
    route_version: str | None = None


_installed: _Installed | None = None
# Pregel's own methods as this module found them, for a call that races `uninstrument()`.
_PREGEL_STREAM, _PREGEL_ASTREAM = Pregel.__dict__["stream"], Pregel.__dict__["astream"]
_lock = threading.Lock()


def instrument(
    *,
    route_version: str | None = None,
    wait_policies: Mapping[str, WaitPolicy] | None = None,
    verifier: Verifier | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    durable: bool = False,
) -> None:
    """Observe every graph this process runs and give every `create_agent` agent built from now on the middleware.

    The keywords are `observe`'s, given to every observed run (`route_version` also to the middleware
    it adds). A second call while instrumented changes nothing: `uninstrument()` first to change them.
    Agents built before the call keep the middleware they were built with (a compiled agent's hooks
    are part of its nodes); their runs are still observed, and their transfers recorded from the graph.
    """
    global _installed
    with _lock:
        if _installed is not None:
            return
        installed = _Installed(
            stream=Pregel.__dict__["stream"],
            astream=Pregel.__dict__["astream"],
            create_agent_code=factory.create_agent.__code__,
            observing={
                "wait_policies": wait_policies,
                "verifier": verifier,
                "retry_on": retry_on,
                "route_version": route_version,
                "durable": durable,
            },
            route_version=route_version,
        )
        _installed = installed  # before the swaps: a swapped function always finds what it needs
        Pregel.stream = _observed_stream  # type: ignore[method-assign]
        Pregel.astream = _observed_astream  # type: ignore[method-assign]
        _equip_create_agent(installed)


def uninstrument() -> None:
    """Put back what `instrument()` replaced, the very same objects; nothing when not instrumented."""
    global _installed
    with _lock:
        if _installed is None:
            return
        Pregel.stream = _installed.stream  # type: ignore[method-assign]
        Pregel.astream = _installed.astream  # type: ignore[method-assign]
        factory.create_agent.__code__ = _installed.create_agent_code
        del factory.create_agent.__signature__
        _installed = None


# --- graphs ------------------------------------------------------------------------------------------


def _observed_stream(self: Pregel, input: Any, config: Any = None, **kwargs: Any) -> Iterator[Any]:
    installed = _installed
    if installed is None or _part_of_a_run(config):
        original = installed.stream if installed is not None else _PREGEL_STREAM
        return original(self, input, config, **kwargs)
    chunks = observe.stream(self, input, _run_config(self, config), **installed.observing, **kwargs)
    return _scoped(chunks, _Shape.asked(self, kwargs))


def _observed_astream(self: Pregel, input: Any, config: Any = None, **kwargs: Any) -> AsyncIterator[Any]:
    installed = _installed
    if installed is None or _part_of_a_run(config):
        original = installed.astream if installed is not None else _PREGEL_ASTREAM
        return original(self, input, config, **kwargs)
    chunks = aobserve.astream(self, input, _run_config(self, config), **installed.observing, **kwargs)
    return _ascoped(chunks, _Shape.asked(self, kwargs))


def _part_of_a_run(config: Any) -> bool:
    """This call runs inside a run already (an observed one, or any LangGraph task), or is observe's own."""
    if _INSIDE_OBSERVED_RUN.get():
        return True
    if ((config or {}).get("configurable") or {}).get(OBSERVED_KEY):
        return True
    ambient = (var_child_runnable_config.get() or {}).get("configurable") or {}
    return bool(ambient.get(OBSERVED_KEY) or ambient.get(_TASK_KEY))


def _run_config(graph: Pregel, config: Any) -> dict:
    """The user's config, with the configurable the graph was bound to beneath it and an operation id.

    `observe` finds the run by `configurable.operation_id` or `thread_id`; a call that names neither
    gets a fresh operation id of its own.
    """
    config = dict(config or {})
    configurable = {**((graph.config or {}).get("configurable") or {}), **(config.get("configurable") or {})}
    if not (configurable.get("operation_id") or configurable.get("thread_id")):
        configurable["operation_id"] = f"{_FRESH_PREFIX}{uuid.uuid4().hex}"
    return {**config, "configurable": configurable}


@contextlib.contextmanager
def _marked() -> Iterator[None]:
    """The run's mark, around one step of its stream (see `_scoped`)."""
    token = _INSIDE_OBSERVED_RUN.set(True)
    try:
        yield
    finally:
        _INSIDE_OBSERVED_RUN.reset(token)


def _scoped(chunks: Iterator[Any], shape: _Shape) -> Iterator[Any]:
    """`chunks`, each step taken inside the run's mark (a generator's body shares its caller's context,
    so the mark is set around each step only: the caller's own code between chunks is outside the run);
    the announcements of the agents `instrument()` equipped left out."""
    try:
        while True:
            with _marked():
                try:
                    chunk = next(chunks)
                except StopIteration:
                    return
            if not shape.quiet_announcement(chunk):
                yield chunk
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            with _marked():
                close()  # the caller stopped early: stop the run as closing `graph.stream` would


async def _ascoped(chunks: AsyncIterator[Any], shape: _Shape) -> AsyncIterator[Any]:
    """`_scoped` for `astream` (the tasks LangGraph starts meanwhile copy the mark), quiet announcements left out."""
    try:
        while True:
            with _marked():
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    return
            if not shape.quiet_announcement(chunk):
                yield chunk
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            with _marked():
                await aclose()


# --- agents ------------------------------------------------------------------------------------------


def _equip_create_agent(installed: _Installed) -> None:
    """Make `create_agent` add the middleware, for every name it was imported under.

    `from langchain.agents import create_agent` at the top of a module binds the function object before
    `instrument()` runs, so rebinding module attributes would miss it. The function object stays the
    same; its code is swapped for a trampoline into `_create_equipped_agent`, which calls a twin built
    from the original code (`uninstrument()` swaps the original code back). The trampoline reaches this
    module through `__import__` (a builtin), so nothing is written into LangChain's namespace; the
    function's signature is kept readable for `inspect` while it is swapped.
    """
    original = factory.create_agent
    if "__signature__" in original.__dict__:
        msg = "create_agent carries a __signature__ of its own: instrument() would not put it back as it was"
        raise RuntimeError(msg)
    twin = type(original)(installed.create_agent_code, original.__globals__, original.__name__, original.__defaults__)
    twin.__kwdefaults__ = dict(original.__kwdefaults__ or {})
    installed.create_agent_twin = twin
    consts = tuple(__name__ if const == _MODULE_PLACEHOLDER else const for const in _trampoline.__code__.co_consts)
    code = _trampoline.__code__.replace(co_consts=consts, co_name=original.__name__, co_qualname=original.__qualname__)
    original.__signature__ = inspect.signature(original)  # type: ignore[attr-defined]
    original.__code__ = code


def _trampoline(*args: Any, **kwargs: Any) -> Any:
    return __import__("__sidewisp_instrumentation_module__", fromlist=("_",))._create_equipped_agent(*args, **kwargs)


def _create_equipped_agent(*args: Any, **kwargs: Any) -> Any:
    """`create_agent` with `SidewispMiddleware` last in the middleware, unless one is there already."""
    installed = _installed
    if installed is None:  # uninstrumented meanwhile: the function has its own code again
        return factory.create_agent(*args, **kwargs)
    middleware = list(kwargs.get("middleware") or ())
    if not any(isinstance(item, SidewispMiddleware) for item in middleware):
        kwargs["middleware"] = [*middleware, _AddedMiddleware(route_version=installed.route_version)]
    return installed.create_agent_twin(*args, **kwargs)


# --- the middleware's announcements -------------------------------------------------------------------

# (operation id, tool-call id) of the calls of agents that `instrument()` equipped, latest last: their
# transfers' announcements (Sidewisp's own wire from the middleware to the observer) stay out of the
# caller's `custom` stream, which without `instrument()` never had them. An agent the user gave the
# middleware announces as before.
_QUIET_CALLS: OrderedDict[tuple[str | None, str], None] = OrderedDict()
_QUIET_LIMIT = 4096  # far more tool calls than run at once between a call and its announcement being read
_quiet_lock = threading.Lock()


class _AddedMiddleware(SidewispMiddleware):
    """The `SidewispMiddleware` that `instrument()` gives an agent: the same, its announcements kept quiet."""

    @property
    def name(self) -> str:
        return SidewispMiddleware.__name__

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        _keep_quiet(request)
        return super().wrap_tool_call(request, handler)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        _keep_quiet(request)
        return await super().awrap_tool_call(request, handler)


def _keep_quiet(request: Any) -> None:
    """Before the tool runs: its announcement, if it is a transfer, may be read as soon as it is written."""
    tool_call_id = request.tool_call.get("id")
    if not tool_call_id:
        return
    try:
        call = (operation_id_of(get_config()), tool_call_id)  # as the announcement names them
    except RuntimeError:  # outside a graph: nothing is announced
        return
    with _quiet_lock:
        _QUIET_CALLS[call] = None
        _QUIET_CALLS.move_to_end(call)
        while len(_QUIET_CALLS) > _QUIET_LIMIT:
            _QUIET_CALLS.popitem(last=False)


@dataclass(frozen=True)
class _Shape:
    """How the caller's chunks look (`graph.stream`'s `stream_mode`, `subgraphs`, `version`)."""

    custom: bool
    listed: bool
    subgraphs: bool
    version: str

    @classmethod
    def asked(cls, graph: Pregel, kwargs: Mapping[str, Any]) -> _Shape:
        stream_mode = kwargs.get("stream_mode")
        if stream_mode is None:
            stream_mode = graph.stream_mode
        modes = [stream_mode] if isinstance(stream_mode, str) else list(stream_mode)
        listed = not isinstance(stream_mode, str)
        return cls("custom" in modes, listed, bool(kwargs.get("subgraphs")), kwargs.get("version") or "v1")

    def quiet_announcement(self, chunk: Any) -> bool:
        """`chunk` is the announcement of a transfer by an agent `instrument()` equipped."""
        if not self.custom:
            return False
        if self.version == "v2":
            data = chunk.get("data") if isinstance(chunk, dict) and chunk.get("type") == "custom" else None
        elif self.listed:
            data = chunk[-1] if isinstance(chunk, tuple) and len(chunk) >= 2 and chunk[-2] == "custom" else None
        else:
            data = chunk[-1] if self.subgraphs and isinstance(chunk, tuple) else chunk
        if not (isinstance(data, dict) and data.get("event") == HANDOFF_EVENT):
            return False
        return (data.get("operation_id"), data.get("tool_call_id")) in _QUIET_CALLS
