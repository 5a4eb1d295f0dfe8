from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from agents.host.scripted import Call, Say, Script, ScriptedChatModel, summarize


@tool
def ping(host: str) -> str:
    """Ping a host."""
    return "pong"


def _model() -> ScriptedChatModel:
    return ScriptedChatModel(policy=Script((Call("ping", {"host": "db"}), Say("all good"))))


def test_it_calls_a_bound_tool():
    reply = _model().bind_tools([ping]).invoke([HumanMessage("is the db up?")])

    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("ping", {"host": "db"})]


def test_it_streams_the_tool_call_as_chunks():
    chunks = list(_model().bind_tools([ping]).stream([HumanMessage("is the db up?")]))

    tool_chunks = [c for chunk in chunks for c in chunk.tool_call_chunks]
    assert [c["name"] for c in tool_chunks] == ["ping"]
    assert tool_chunks[0]["args"] == '{"host": "db"}'


def test_the_same_conversation_gets_the_same_answer_and_tool_call_id():
    conversation = [HumanMessage("is the db up?")]

    first = _model().bind_tools([ping]).invoke(conversation)
    second = _model().bind_tools([ping]).invoke(conversation)

    assert first.tool_calls == second.tool_calls


def test_another_conversation_gets_another_tool_call_id():
    first = _model().bind_tools([ping]).invoke([HumanMessage("is the db up?")])
    second = _model().bind_tools([ping]).invoke([HumanMessage("is the cache up?")])

    assert first.tool_calls[0]["id"] != second.tool_calls[0]["id"]


def test_it_moves_to_the_next_step_after_its_tool_result():
    call = AIMessage("", tool_calls=[{"name": "ping", "args": {}, "id": "c1", "type": "tool_call"}])
    conversation = [HumanMessage("is the db up?"), call, ToolMessage("pong", tool_call_id="c1", name="ping")]

    reply = _model().bind_tools([ping]).invoke(conversation)

    assert reply.content == "all good"
    assert reply.tool_calls == []


def test_a_scripted_summary_keeps_the_script_where_it_was():
    call = AIMessage("", tool_calls=[{"name": "ping", "args": {}, "id": "c1", "type": "tool_call"}])
    summary = summarize([call, ToolMessage("pong", tool_call_id="c1", name="ping")])

    reply = _model().bind_tools([ping]).invoke([HumanMessage(summary)])

    assert reply.content == "all good"
