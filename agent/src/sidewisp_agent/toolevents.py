"""The observer's view of a run's tool calls, without LangGraph's `tools` stream mode.

The `tools` mode attaches LangGraph's `StreamToolCallHandler`, a streaming callback handler
(`_StreamingCallbackHandler`), and langchain-core's `BaseChatModel._should_stream` streams a chat model
whenever one is attached: every model of an observed run would then be called with `stream=True`
where the unobserved graph calls it with `stream=False` (another request to the provider: usage,
logprobs, a proxy that refuses streaming). `ToolEvents` is a plain callback handler that puts the same
`tool-started` / `tool-finished` / `tool-error` payloads (names and ids, the tool's output object; no
input, no error message) on the run's stream as `custom` chunks marked `TOOL_EVENT`, in the order the
`tools` mode would, since the observer asks for `custom` anyway. The driver hands them to the tracker
as `tools` events (`unwrapped`) and never to the caller. A caller who asks for `messages` or `tools`
themselves still gets LangGraph's own handler, and their models stream as they would unobserved.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langgraph._internal._constants import CONF, CONFIG_KEY_STREAM
from langgraph.config import get_config
from langgraph.constants import TAG_NOSTREAM
from langgraph.errors import GraphDrained, GraphInterrupt
from langgraph.pregel._messages import graph_namespace

TOOL_EVENT = "sidewisp.tool"


class ToolEvents(BaseCallbackHandler):
    """Tool-call lifecycle events on the run's `custom` stream (see the module's docstring)."""

    run_inline = True  # called where the tool runs, so the events keep their place among the stream's
    # Only tool events (LangChain dispatches those under `ignore_agent`): every chain, model and retry event of
    # the run skips this handler instead of calling a no-op on the agent's path.
    ignore_chain = ignore_llm = ignore_chat_model = ignore_retriever = ignore_retry = ignore_custom_event = True

    def __init__(self) -> None:
        self._calls: dict[UUID, tuple[tuple[str, ...], str]] = {}

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not metadata or (tags and TAG_NOSTREAM in tags):
            return
        ns = graph_namespace(metadata) if metadata.get("langgraph_checkpoint_ns") else ()
        call_id = str(kwargs.get("tool_call_id") or run_id)
        self._calls[run_id] = (ns, call_id)
        name = (serialized or {}).get("name") or kwargs.get("name") or ""
        _put(ns, {"event": "tool-started", "tool_call_id": call_id, "tool_name": name})

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if (call := self._calls.pop(run_id, None)) is not None:
            _put(call[0], {"event": "tool-finished", "tool_call_id": call[1], "output": output})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        call = self._calls.pop(run_id, None)
        # An interrupted tool is paused, not failed: it runs again on resume (as the `tools` mode says).
        if call is not None and not isinstance(error, GraphInterrupt | GraphDrained):
            _put(call[0], {"event": "tool-error", "tool_call_id": call[1]})


def watched(config: dict) -> dict:
    """`config` with a `ToolEvents` of its own among its callbacks (inherited by every task, subgraph and tool)."""
    return {**config, "callbacks": with_handler(config.get("callbacks"), ToolEvents())}


def with_handler(callbacks: Any, handler: BaseCallbackHandler) -> Any:
    """`callbacks` (a list, a manager or None) and `handler`, inherited; the caller's own left as they were."""
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        return manager
    return [*(callbacks or ()), handler]


def _put(ns: tuple[str, ...], payload: dict[str, Any]) -> None:
    try:
        stream = get_config()[CONF].get(CONFIG_KEY_STREAM)
    except RuntimeError:
        return  # a tool run outside any graph task: nothing to observe
    if stream is not None:
        stream((ns, "custom", {**payload, TOOL_EVENT: True}))


def unwrapped(mode: str, chunk: Any) -> Mapping[str, Any] | None:
    """The `tools` payload of one of `ToolEvents`' chunks; None for any other chunk."""
    if mode != "custom" or not isinstance(chunk, Mapping) or chunk.get(TOOL_EVENT) is not True:
        return None
    return {key: value for key, value in chunk.items() if key != TOOL_EVENT}
