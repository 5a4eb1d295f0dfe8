"""A local OpenAI-compatible chat completions server for tests: scripted, deterministic, on 127.0.0.1.

It answers `POST /v1/chat/completions` as OpenAI does for what Sidewisp's teams send: tool calls and
text, non-streaming (one JSON body) or streaming (server-sent events ending in `data: [DONE]`, with
a usage chunk when `stream_options.include_usage` asks for one). It refuses a history OpenAI refuses
with OpenAI's HTTP 400: an assistant message with `tool_calls` not followed by a tool message for each
call, or a tool message that answers no preceding call. Every request body is recorded, so a test can
compare what two runs asked the provider.

The answer is `policy(conversation, bound tool names)`, the scripted models' `Step` (`Call`, `Say`, or
a tuple of `Call`s for one turn that calls several tools); the conversation is rebuilt as LangChain
messages (system messages left out, each tool message named after the call it answers). Tool-call
ids are digests of the conversation, so two runs of one script get the same ids.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from agents.host.scripted import Call, Say, Step, conversation_digest

Policy = Callable[[Sequence[BaseMessage], Sequence[str]], Step]
MODEL = "gpt-sidewisp-test"
UNANSWERED_CALLS = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
ORPHAN_TOOL_MESSAGE = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
)


class HistoryRefused(ValueError):
    """What OpenAI answers with HTTP 400 `invalid_request_error`."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.param = f"messages.[{index}].role"


def by_tools(scripts: Mapping[str, Policy]) -> Policy:
    """One policy per agent, chosen by a tool only that agent is given (its first key found in the request)."""

    def policy(conversation: Sequence[BaseMessage], tool_names: Sequence[str]) -> Step:
        for name, script in scripts.items():
            if name in tool_names:
                return script(conversation, tool_names)
        return Say("no script for these tools")

    return policy


@dataclass
class OpenAIServer:
    """The running server: `base_url` for `OPENAI_BASE_URL`, `requests` the bodies received, in order."""

    policy: Policy
    requests: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # the 400 messages sent
    _httpd: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and completion (or error) OpenAI would give for `body`."""
        self.requests.append(body)
        try:
            conversation = rebuilt(body.get("messages") or [])
        except HistoryRefused as refused:
            self.refused.append(str(refused))
            error = {"message": str(refused), "type": "invalid_request_error", "param": refused.param, "code": None}
            return 400, {"error": error}
        names = tuple(t["function"]["name"] for t in body.get("tools") or () if t.get("type") == "function")
        return 200, completion(body, conversation, self.policy(conversation, names))


def rebuilt(messages: Sequence[Mapping[str, Any]]) -> list[BaseMessage]:
    """The conversation of an OpenAI request as LangChain messages; refuses what OpenAI refuses."""
    conversation: list[BaseMessage] = []
    names: dict[str, str] = {}
    open_calls: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role != "tool" and open_calls:
            raise HistoryRefused(UNANSWERED_CALLS.format(ids=", ".join(open_calls)), index - 1)
        if role in ("system", "developer"):
            continue
        if role == "user":
            conversation.append(HumanMessage(_text(message.get("content"))))
        elif role == "assistant":
            calls = [
                {
                    "name": c["function"]["name"],
                    "args": json.loads(c["function"]["arguments"] or "{}"),
                    "id": c["id"],
                    "type": "tool_call",
                }
                for c in message.get("tool_calls") or ()
            ]
            names.update({c["id"]: c["name"] for c in calls})
            open_calls = [c["id"] for c in calls]
            conversation.append(AIMessage(content=_text(message.get("content")), tool_calls=calls))
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in names:
                raise HistoryRefused(ORPHAN_TOOL_MESSAGE, index)
            if call_id in open_calls:
                open_calls.remove(call_id)
            content = _text(message.get("content"))
            conversation.append(ToolMessage(content=content, tool_call_id=call_id, name=names[call_id]))
    if open_calls:
        raise HistoryRefused(UNANSWERED_CALLS.format(ids=", ".join(open_calls)), len(messages) - 1)
    return conversation


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return content or ""


def completion(body: Mapping[str, Any], conversation: list[BaseMessage], step: Any) -> dict[str, Any]:
    calls = step if isinstance(step, tuple) else (step,) if isinstance(step, Call) else ()
    message: dict[str, Any] = {"role": "assistant", "content": step.text if isinstance(step, Say) else None}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{conversation_digest(conversation, call.tool, str(i))}",
                "type": "function",
                "function": {"name": call.tool, "arguments": json.dumps(_args(call, conversation))},
            }
            for i, call in enumerate(calls)
        ]
    prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages") or ()) // 4 + 1
    return {
        "id": f"chatcmpl-{conversation_digest(conversation)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", MODEL),
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7},
    }


def _args(call: Call, conversation: list[BaseMessage]) -> dict[str, Any]:
    return call.args(conversation) if callable(call.args) else dict(call.args)


def sse_chunks(body: Mapping[str, Any], answer: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The `chat.completion.chunk`s of a streamed `answer`, as OpenAI splits them."""
    choice = answer["choices"][0]
    base = {k: answer[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    text = choice["message"]["content"] or ""
    for start in range(0, len(text), 8):
        yield chunk({"content": text[start : start + 8]})
    for index, call in enumerate(choice["message"].get("tool_calls") or ()):
        head = {"index": index, "id": call["id"], "type": "function"}
        yield chunk({"tool_calls": [{**head, "function": {"name": call["function"]["name"], "arguments": ""}}]})
        yield chunk({"tool_calls": [{"index": index, "function": {"arguments": call["function"]["arguments"]}}]})
    yield chunk({}, choice["finish_reason"])
    if (body.get("stream_options") or {}).get("include_usage"):
        yield {**base, "choices": [], "usage": answer["usage"]}


def _handler(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._json(404, {"error": {"message": f"Unknown path {self.path}", "type": "invalid_request_error"}})
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            status, answer = server.answer(body)
            if status != 200 or not body.get("stream"):
                self._json(status, answer)
                return
            events = [f"data: {json.dumps(c)}\n\n" for c in sse_chunks(body, answer)] + ["data: [DONE]\n\n"]
            payload = "".join(events).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _json(self, status: int, answer: dict[str, Any]) -> None:
            payload = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the tests read `requests`, not the log

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that drops its kept-alive connection as the test ends is no failure of the test


@contextmanager
def serving(policy: Policy) -> Iterator[OpenAIServer]:
    """An `OpenAIServer` on a free port of 127.0.0.1 for the duration of the block."""
    server = OpenAIServer(policy)
    server._httpd = _Server(("127.0.0.1", 0), _handler(server))
    thread = threading.Thread(target=server._httpd.serve_forever, name="openai-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server._httpd.shutdown()
        server._httpd.server_close()
        thread.join()
