"""Deterministic scripted chat models: the default model of every Sidewisp agent.

A script is a pure function of the conversation, so a graph resumed from its
checkpoint in another process makes the same next move. Tool-call ids are
digests of the conversation, so a re-run produces the same ids (and therefore
the same handoff ids).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from sidewisp_agent.reopening import is_reopen_note

from agents.host import provider

SUMMARY_PREFIX = "SCRIPTED-SUMMARY"
_SUMMARY_TOOLS = re.compile(rf"{SUMMARY_PREFIX} tools=([\w,]*)")
MODEL_ENV = provider.MODEL_ENV

Args = dict[str, Any] | Callable[[Sequence[BaseMessage]], dict[str, Any]]


@dataclass(frozen=True)
class Call:
    """Call `tool` with `args` (or args computed from the conversation)."""

    tool: str
    args: Args = field(default_factory=dict)


@dataclass(frozen=True)
class Say:
    """Answer with `text` and no tool call (the agent ends its turn)."""

    text: str


@dataclass(frozen=True)
class Fail:
    """Raise like a provider that is down (the model-retry middleware sees an exception)."""


# A tuple of calls is one AI message that calls several tools at once, as real models often answer
# (`[lookup_fare, transfer_to_ben]`: spec v1.3, the whole turn).
Step = Call | Say | Fail | tuple[Call, ...]


@dataclass(frozen=True)
class Script:
    """A sequence of steps; the next step is the number of this agent's tool results so far.

    Only results of tools bound to this model count, so each agent of a team
    follows its own script over the shared conversation. Results folded into a
    scripted summary count too, so summarization never replays a step.
    """

    steps: tuple[Step, ...]

    def __call__(self, messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> Step:
        done = tool_results(messages, tool_names)
        return self.steps[min(len(done), len(self.steps) - 1)]


def tool_results(messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> list[str]:
    names: list[str] = []
    for message in messages:
        if isinstance(message, ToolMessage) and message.name in tool_names:
            names.append(message.name)
        elif isinstance(message, HumanMessage) and (match := _SUMMARY_TOOLS.search(str(message.content))):
            names.extend(name for name in match.group(1).split(",") if name in tool_names)
    return names


def last_result(messages: Sequence[BaseMessage], tool_name: str) -> str:
    """The content of the latest result of `tool_name` ("" when there is none)."""
    for message in reversed(messages):
        if isinstance(message, ToolMessage) and message.name == tool_name:
            return str(message.content)
    return ""


def conversation_digest(messages: Sequence[BaseMessage], *extra: str) -> str:
    parts = [
        [
            type(m).__name__,
            str(m.content),
            [c["id"] for c in getattr(m, "tool_calls", [])],
            getattr(m, "tool_call_id", ""),
        ]
        for m in messages
    ]
    return hashlib.sha256(json.dumps([parts, extra], default=str).encode()).hexdigest()[:16]


class ScriptedChatModel(BaseChatModel):
    """A chat model whose answer is `policy(conversation, bound tool names)`."""

    policy: Any

    @property
    def _llm_type(self) -> str:
        return "sidewisp-scripted"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

    def _respond(self, messages: list[BaseMessage], tools: Sequence[dict] | None = None) -> AIMessage:
        # The prompt is not the conversation; a reopen note is (a script may answer it: agents.demo.scenarios).
        conversation = [m for m in messages if not isinstance(m, SystemMessage) or is_reopen_note(m)]
        names = tuple(t["function"]["name"] for t in tools or ())
        step = self.policy(conversation, names)
        if isinstance(step, Fail):
            msg = "scripted provider unavailable"
            raise RuntimeError(msg)
        if isinstance(step, Say):
            return AIMessage(content=step.text)
        calls = step if isinstance(step, tuple) else (step,)
        return AIMessage(content="", tool_calls=[_tool_call(conversation, call, n) for n, call in enumerate(calls)])

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        message = self._respond(messages, kwargs.get("tools"))
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages, stop=None, run_manager=None, **kwargs) -> Iterator[ChatGenerationChunk]:
        message = self._respond(messages, kwargs.get("tools"))
        if message.content:
            yield ChatGenerationChunk(message=AIMessageChunk(content=message.content))
        chunks = [
            {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
            for i, c in enumerate(message.tool_calls)
        ]
        yield ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=chunks, chunk_position="last"))


def _tool_call(conversation: Sequence[BaseMessage], call: Call, index: int) -> dict[str, Any]:
    """The `index`-th tool call of a turn. Its id digests the conversation, so a re-run makes the same id; a
    turn's first call has the id it would have alone."""
    args = call.args(conversation) if callable(call.args) else dict(call.args)
    call_id = f"call_{conversation_digest(conversation, call.tool, *([str(index)] if index else []))}"
    return {"name": call.tool, "args": args, "id": call_id, "type": "tool_call"}


def summarize(messages: Sequence[BaseMessage]) -> str:
    """The scripted summarizer: counts and tool names only, so scripts can continue after it."""
    names = [m.name for m in messages if isinstance(m, ToolMessage) and m.name]
    return f"{SUMMARY_PREFIX} tools={','.join(names)} messages={len(messages)}"


def chat_model(policy: Callable[..., Step]) -> BaseChatModel:
    """`SIDEWISP_MODEL=provider:model` selects a real model; the default is the scripted one."""
    choice = model_choice()
    if choice == "scripted":
        return ScriptedChatModel(policy=policy)
    return _provider_model(choice)


# --- the scripted tool emulator (dry runs) ------------------------------------

# What an emulated tool answers: the shape of the real result, with ids marked as dry.
EMULATED_RESULTS = {
    "create_ticket": "ticket_id=T-dry-{digest} state=open",
    "update_ticket": "ticket_id={ticket_id} state={state}",
    "place_order": "order_id=O-dry-{digest} amount=0",
    "refund": "refund_id=R-dry-{digest}",
    "shell": "(dry run: command not executed)",
}
_EMULATION_PROMPT = re.compile(r"^Tool: (?P<tool>\S+)$.*^Arguments: (?P<args>.*?)$", re.MULTILINE | re.DOTALL)


def emulate_tool(messages: Sequence[BaseMessage], tool_names: Sequence[str]) -> Say:
    """The scripted emulator's answer to `LLMToolEmulator`'s prompt: a fixed result per tool."""
    prompt = str(messages[-1].content) if messages else ""
    match = _EMULATION_PROMPT.search(prompt)
    if match is None:
        return Say("(emulated) ok")
    tool, raw_args = match.group("tool"), match.group("args")
    try:
        args = ast.literal_eval(raw_args)
    except (ValueError, SyntaxError):
        args = {}
    values = {**(args if isinstance(args, dict) else {}), "digest": hashlib.sha256(raw_args.encode()).hexdigest()[:10]}
    try:
        return Say(EMULATED_RESULTS.get(tool, f"(emulated) {tool} ok").format(**values))
    except (KeyError, IndexError):
        return Say(f"(emulated) {tool} ok")


def emulator_model() -> BaseChatModel:
    """The model `LLMToolEmulator` asks: scripted by default, else the configured provider's."""
    choice = model_choice()
    if choice == "scripted":
        return ScriptedChatModel(policy=emulate_tool)
    return _provider_model(choice)


def model_choice() -> str:
    """`scripted`, or the `provider:model` string of SIDEWISP_MODEL."""
    return provider.model_choice()


def _provider_model(choice: str) -> BaseChatModel:
    from langchain.chat_models import init_chat_model

    provider.check_model_choice(choice)  # a missing package named, not a bare ImportError
    return init_chat_model(choice)
