"""One minimization rule for every string that reaches a receipt, a middleware report, an event or a page."""

from __future__ import annotations

import json
import logging
import unicodedata

import pytest
from django.urls import reverse
from hypothesis import given
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from sidewisp_agent.middleware import UNKNOWN_TOOL, SidewispMiddleware

from agents.host.scripted import Call, Say, ScriptedChatModel
from agents.observe import database, writer
from receipts.models import MiddlewareReport, Run
from receipts.verdicts.bundle import BundleError, parse_bundle, parse_part, parse_report_detail, redacted, text_problem

MADE_UP_TOOL = "sk-live-4eC39HqLyjWDarjtT1zdp7dc"

REFUSED = {
    "a 5,000-character name": "t" * 5000,
    "an RTL override": "sales\u202etxt.exe",
    "a path inside a sentence": "see /home/alice/secret.txt",
    "a Windows drive": "C:\\Users\\x",
    "a Windows drive with slashes": "report in c:/temp",
    "a UNC share": "\\\\server\\share",
    "a home directory": "~/x",
    "a home directory inside": "notes at ~/x",
    "another user's home": "~alice",
    "a file URL": "file:///x",
    "a file URL inside": "open FILE:///etc/passwd",
    "an assigned path": "config=/etc/app.toml",
    "a fullwidth solidus": "see \uff0fhome\uff0falice",
    "an OpenAI key": "sk-proj-abcdEFGH1234ijkl",
    "a made-up tool named like a key": MADE_UP_TOOL,
    "a Stripe key": "rk_live_51HxQabc123",
    "a GitHub token": "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
    "an AWS key id": "AKIAIOSFODNN7EXAMPLE",
    "a Slack token": "xoxb-123456789012-abcdef",
    "a bearer token": "Authorization: Bearer abc.def",
    "a password assignment": "password=hunter2",
    "a token assignment": "token: 12345",
    "a JSON web token": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
    "a long hex run": "h-" + "0123456789abcdef" * 3,
    "a random base62 run": "id-Xq8Lr2ZpW9vN4mT7kB3sJ6hF1dG5cY0a",
    "a newline": "sales\nops",
}
ACCEPTED = [
    "call_abc123",
    "h-7f3a09c1d2e4b5a6",
    "op-91c2",
    "routes/1",
    "sidewisp.handoff/1",
    "./relative/name",
    "2026-07-30T10:00:00Z",
    "2026-07-30T12:00:00.123456+02:00",
    "purchase_approval",
    "secret_disclosure",
    "resume_token_id",
    "rt-55d0",
    "order_exists",
    "sales-eu",
    "Ops Lead",
    "café",
    # uuid4s, fixed: test ids must be the same in every process of a parallel run (pytest-xdist collects in each)
    "b372a966-7857-46f1-83d4-3ccd6f6c2cb1",
    "op-9bf7b555-d070-4561-8e05-f6fe46d53f7d",
    "385bcbe636f54a51987e16191f5586df",
    "call_FtSWbmP6f9nAXcGaMwYH4jwe",  # an OpenAI tool-call id
    "toolu_01A09q90qw90lq917835lq9",  # an Anthropic tool-call id
    "required_context_keys_for_customer_tier_2026",
    "sidewisp_graph_support_desk_3fa9c2d1",
    "task-12345678",
]


@pytest.mark.parametrize("text", REFUSED.values(), ids=REFUSED.keys())
def test_it_refuses_a_string_that_may_not_be_stored(text: str) -> None:
    assert text_problem(text) is not None


@pytest.mark.parametrize("text", ACCEPTED)
def test_it_accepts_names_ids_digests_and_times(text: str) -> None:
    assert text_problem(text) is None


# Spec v1.3: ids and names are held to known credential shapes only, and a refused one is stored redacted.
KEPT_AS_IDS = {"a long hex run", "a random base62 run", "a token assignment"}


@pytest.mark.parametrize("text", REFUSED.values(), ids=REFUSED.keys())
def test_an_id_is_stored_as_it_is_only_when_it_is_safe_and_redacted_otherwise(text: str) -> None:
    found = parse_bundle({"schema": "sidewisp.handoff/1", "handoff_id": "h-1", "operation_id": text})

    if text in {REFUSED[name] for name in KEPT_AS_IDS}:
        assert found.operation_id == text
    else:
        assert found.operation_id == redacted(text)
    assert found.handoff_id == "h-1"


def test_a_report_detail_value_is_a_name_redacted_when_refused() -> None:
    detail = parse_report_detail({"tool": "t" * 5000, "attempts": 3})

    assert detail == {"tool": redacted("t" * 5000), "attempts": 3}
    assert parse_report_detail({"tool": "check_inventory", "attempts": 3}) == {"tool": "check_inventory", "attempts": 3}


def test_a_report_detail_key_is_never_echoed() -> None:
    with pytest.raises(BundleError) as caught:
        parse_report_detail({"/home/alice": 1})

    assert "/home/alice" not in str(caught.value)


# --- properties -------------------------------------------------------------------------

_CONTROL = {"Cc", "Cf", "Cs", "Zl", "Zp"}
# An oracle written apart from the rule: fragments that must never be stored.
_NEVER = (" /", "=/", "file:", "FILE:", "~/", ":\\", ":/", "\\\\", "sk-live", "ghp_", "AKIA", "Bearer ", "password=")
_DANGEROUS = st.sampled_from(
    [
        " /home/alice/secret.txt",
        "=/etc/passwd",
        " C:\\Users\\x",
        " ~/x",
        " file:///x",
        " \\\\server\\share",
        "\u202e",
        "\u2066",
        "\x00",
        "\n",
        " sk-live-4eC39HqLyjWD",
        " ghp_abcdefghijklmnop1234",
        " AKIAIOSFODNN7EXAMPLE",
        " xoxb-1234-abcd",
        " Bearer abc.def.ghi",
        " password=hunter2",
    ]
)
_NAME_CHARS = st.text(st.characters(categories=("Lu", "Ll", "Nd"), include_characters="_-."), max_size=40)


def _stored(text: str) -> list[str]:
    """What a receipt and a report would keep of `text` (nothing when they refuse it, `redacted:...` when
    they redact it)."""
    kept = []
    try:
        kept.append(parse_part("created", {"receiver": text}).receiver)
    except BundleError:
        pass
    try:
        kept.append(parse_report_detail({"tool": text})["tool"])
    except BundleError:
        pass
    return kept


@given(st.text(max_size=300))
def test_whatever_goes_in_nothing_unsafe_is_stored(text: str) -> None:
    for kept in _stored(text):
        assert len(kept) <= 200
        assert not any(unicodedata.category(char) in _CONTROL for char in kept)
        assert not kept.startswith(("/", "\\", "~"))
        assert not any(fragment in unicodedata.normalize("NFKC", kept) for fragment in _NEVER)


@given(_NAME_CHARS, _DANGEROUS, _NAME_CHARS)
def test_a_dangerous_fragment_anywhere_is_never_stored_as_it_is(before: str, fragment: str, after: str) -> None:
    assert _stored(before + fragment + after) == [redacted(before + fragment + after)] * 2


# --- the report path and the agent ------------------------------------------------------


def _detail_of(run: Run, kind: str) -> dict:
    return MiddlewareReport.objects.get(run=run, kind=kind).detail


def test_a_report_with_a_refused_name_is_kept_redacted_and_names_the_field(db, caplog) -> None:
    run = Run.objects.create(operation_id="op-min-1", thread_id="th-min-1")

    stored = database.add_report("op-min-1", "sales\u202e", MiddlewareReport.Kind.TOOL_ERROR, {"tool": "x"}, "1")
    database.add_report("op-min-1", "sales", MiddlewareReport.Kind.CALL_LIMIT, {"tool": "see /home/alice/x"}, "1")

    assert stored is True
    assert run.reports.get(kind="tool_error").agent == redacted("sales\u202e")
    assert run.reports.get(kind="call_limit").detail == {"tool": redacted("see /home/alice/x")}
    named = sorted(run.reports.filter(kind="value_redacted").values_list("detail", flat=True), key=str)
    assert named == [{"part": "report", "field": "agent"}, {"part": "report", "field": "detail.tool"}]
    stored_text = str(list(run.reports.values_list("agent", "detail")))
    assert "/home/alice" not in stored_text and "\u202e" not in stored_text


def test_a_report_that_is_not_valid_is_dropped_and_logged_by_field_only(db, caplog) -> None:
    run = Run.objects.create(operation_id="op-min-1", thread_id="th-min-1")
    caplog.set_level(logging.WARNING, logger="receipts.ingest.recording")

    stored = database.add_report("op-min-1", "sales", MiddlewareReport.Kind.TOOL_ERROR, {"tool": {"x": 1}}, "1")

    assert stored is False
    assert not run.reports.filter(kind="tool_error").exists()
    assert run.reports.get(kind="evidence_dropped").detail == {"part": "report", "field": "detail.tool"}
    assert "detail.tool" in caplog.text


def test_a_report_path_failure_never_raises(db) -> None:
    assert database.add_report(7, "sales", MiddlewareReport.Kind.TOOL_ERROR, {}, "1") is False
    assert database.add_report("op-min-2", "sales", "made_up_kind", {}, "1") is False
    assert database.add_report("op-min-2", "sales", MiddlewareReport.Kind.TOOL_ERROR, {"n": object()}, "1") is False


@tool
def lookup_customer(email: str) -> str:
    """Find a customer's account."""
    return "account found"


def _calls_a_made_up_tool(messages, tool_names):
    if any(isinstance(message, ToolMessage) for message in messages):
        return Say("Done.")
    return Call(MADE_UP_TOOL, {"q": "x"})


def test_a_tool_the_model_made_up_is_reported_as_unknown_tool_and_never_by_name(
    transactional_db, monkeypatch, client, person
) -> None:
    events = []
    monkeypatch.setattr("receipts.ingest.broadcast.publish", events.append)
    run = Run.objects.create(operation_id="op-made-up", thread_id="th-made-up")
    agent = create_agent(
        ScriptedChatModel(policy=_calls_a_made_up_tool),
        tools=[lookup_customer],
        middleware=[SidewispMiddleware()],
        name="desk",
    )

    agent.invoke(
        {"messages": [HumanMessage("help")]},
        {"configurable": {"thread_id": "th-made-up", "operation_id": "op-made-up"}},
    )
    writer.flush()  # without observe, nothing waits for the batched writer

    assert _detail_of(run, "tool_error") == {"tool": UNKNOWN_TOOL}
    client.force_login(person("watcher", "viewer"))
    page = client.get(reverse("sidewisp:run-detail", args=[run.pk])).content.decode()
    assert UNKNOWN_TOOL in page
    assert MADE_UP_TOOL not in page
    assert events and MADE_UP_TOOL not in json.dumps(events)
