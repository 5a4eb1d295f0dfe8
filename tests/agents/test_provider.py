"""A real provider client: teams whose agents are `ChatOpenAI`, answered by a scripted OpenAI-compatible
server on 127.0.0.1 (tests/agents/openai_server.py), observed, unobserved and hosted; and the start-up
error of a SIDEWISP_MODEL whose integration package is missing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import openai
import pytest
from django.core.exceptions import ImproperlyConfigured
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from agents.host import hosting
from agents.host.provider import TESTED_VERSIONS, check_model_choice
from agents.models import Order
from receipts.models import Handoff, Run
from tests.agents import teams
from tests.agents.hosted_graph import DESK, INPUT, PAYMENTS
from tests.agents.openai_server import by_tools, serving
from tests.agents.stored import aobserve, observe
from tests.conftest import start_worker_process, wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
PASS = lambda op: ("fare_booked", "pass", "v-1")  # noqa: E731
FARES = by_tools({"lookup_fare": teams.ALICE, "book_seat": teams.BEN})


def config_for(name: str, *, observed: bool = True) -> dict:
    token = uuid.uuid4().hex[:8]
    configurable = {"thread_id": f"th-{name}-{token}"}
    if observed:
        configurable["operation_id"] = f"op-{name}-{token}"
    return {"configurable": configurable, "recursion_limit": 50}


def ask() -> dict:
    return {"messages": [HumanMessage("Book me a seat from Lisbon to Porto.")]}


def verdicts(config: dict) -> list[str]:
    runs = Handoff.objects.filter(run__operation_id=config["configurable"]["operation_id"])
    return [h.verdict for h in runs.order_by("created_at", "pk")]


def _transcript(graph, config) -> list[tuple[str, str, list[str]]]:
    messages = graph.get_state(config).values["messages"]
    return [(m.type, str(m.content), [c["name"] for c in getattr(m, "tool_calls", [])]) for m in messages]


# --- observation is invisible to the model ------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_observed_team_calls_its_provider_exactly_as_the_unobserved_one(team_contracts, mode):
    plain_config, config = config_for("plain", observed=False), config_for("observed")
    with serving(FARES) as server:
        plain_graph, graph = (teams.openai_swarm(InMemorySaver(), server.base_url) for _ in range(2))

        def unobserved_then_observed():
            plain_graph.invoke(ask(), plain_config)
            requests = list(server.requests)
            return requests, observe(graph, ask(), config, verifier=PASS)

        async def aunobserved_then_observed():
            # One event loop for both: ChatOpenAI keeps one async HTTP client per base URL.
            await plain_graph.ainvoke(ask(), plain_config)
            requests = list(server.requests)
            return requests, await aobserve(graph, ask(), config, verifier=PASS)

        if mode == "sync":
            unobserved, outcome = unobserved_then_observed()
        else:
            unobserved, outcome = asyncio.run(aunobserved_then_observed())
        observed = server.requests[len(unobserved) :]

    assert [r["stream"] for r in unobserved] == [False, False, False, False]
    # Every request alike, body for body: the streaming flag, the tools, the messages, every argument.
    assert observed == unobserved
    assert (outcome.status, verdicts(config)) == ("complete", ["HEALTHY"])
    assert _transcript(graph, config) == _transcript(plain_graph, plain_config)


def test_a_caller_who_streams_messages_streams_the_provider_as_unobserved(team_contracts):
    with serving(FARES) as server:
        plain_graph, plain_config = (
            teams.openai_swarm(InMemorySaver(), server.base_url),
            config_for("plain", observed=False),
        )
        tokens = list(plain_graph.stream(ask(), plain_config, stream_mode="messages"))
        unobserved, server.requests[:] = list(server.requests), []

        graph, config = teams.openai_swarm(InMemorySaver(), server.base_url), config_for("streamed")
        chunks = observe.stream(graph, ask(), config, stream_mode="messages", verifier=PASS, durable=True)
        observed_tokens = list(chunks)
        observed = server.requests

    assert {r["stream"] for r in unobserved} == {True}
    assert observed == unobserved
    assert [m.content for m, _ in observed_tokens] == [m.content for m, _ in tokens]
    assert (chunks.outcome.status, verdicts(config)) == ("complete", ["HEALTHY"])
    assert _transcript(graph, config) == _transcript(plain_graph, plain_config)


def test_a_caller_who_streams_tools_gets_langgraphs_tool_events_alone_and_one_handoff(team_contracts):
    modes = ["tools", "custom"]
    with serving(FARES) as server:
        plain_graph, graph = (teams.openai_swarm(InMemorySaver(), server.base_url) for _ in range(2))
        plain_config = config_for("plain", observed=False)
        unobserved_chunks = list(plain_graph.stream(ask(), plain_config, stream_mode=modes, subgraphs=True))
        unobserved = list(server.requests)
        config = config_for("tools")
        observed_chunks = list(
            observe.stream(graph, ask(), config, stream_mode=modes, subgraphs=True, verifier=PASS, durable=True)
        )
        observed = server.requests[len(unobserved) :]

    events = lambda chunks: [(mode, c.get("event"), c.get("tool_name")) for _, mode, c in chunks]  # noqa: E731
    assert events(observed_chunks) == events(unobserved_chunks)
    assert ("tools", "tool-started", "transfer_to_ben") in events(observed_chunks)
    assert observed == unobserved and {r["stream"] for r in observed} == {True}  # LangGraph's tools mode streams
    assert verdicts(config) == ["HEALTHY"]


# --- a provider that refuses a dangling tool call ------------------------------------------------


def test_a_batched_lookup_and_transfer_refused_by_the_provider_is_an_open_tool_protocol(team_contracts):
    """alice calls [lookup_fare, transfer_to_ben] in one turn; the swarm's transfer carries the turn without
    lookup_fare's answer, so ben's first request has an unanswered call and OpenAI refuses it with a 400."""
    with serving(by_tools({"lookup_fare": teams.BATCHED_ALICE, "book_seat": teams.BEN})) as server:
        graph, config = teams.openai_swarm(InMemorySaver(), server.base_url), config_for("batched")
        with pytest.raises(openai.BadRequestError) as refused:
            observe(graph, ask(), config, verifier=PASS)
        ben_asked = [r for r in server.requests if "book_seat" in [t["function"]["name"] for t in r["tools"]]]

    assert refused.value.status_code == 400
    assert "must be followed by tool messages responding to each 'tool_call_id'" in str(refused.value)
    assert len(ben_asked) == 1 and len(server.refused) == 1  # ben's one request, refused
    assert Run.objects.get(operation_id=config["configurable"]["operation_id"]).status == "failed"
    assert verdicts(config) == ["OPEN_TOOL_PROTOCOL"]


# --- a hosted team on SIDEWISP_MODEL=openai:<model> ---------------------------------------------------

DESK_GRAPH = "tests/agents/hosted_graph.py"
GRAPHS = json.dumps(
    {"express_desk": {"graph": f"{DESK_GRAPH}:make_express_graph", "verifier": f"{DESK_GRAPH}:invoice_paid"}}
)


@pytest.fixture
def desk_on_openai(settings, transactional_db, celery_isolation):
    """A worker whose agents are `init_chat_model("openai:...")` at the scripted server."""
    from agents.demo.contracts import team_contracts as desk_contracts
    from receipts.ingest.contracts import import_document
    from tests.agents.hosted_graph import CONTRACTS

    document = desk_contracts()
    import_document({**document, "routes": {**document["routes"], **CONTRACTS}})
    settings.SIDEWISP_GRAPHS = GRAPHS
    with serving(by_tools({"transfer_to_payments": DESK, "pay_invoice": PAYMENTS})) as server:
        env = {
            "SIDEWISP_GRAPHS": GRAPHS,
            "SIDEWISP_MODEL": "openai:gpt-sidewisp-test",
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "sk-test-only",
        }
        worker = start_worker_process(f"openai{uuid.uuid4().hex[:6]}", celery_isolation, extra_env=env)
        yield server
        worker.stop()


def test_a_hosted_team_on_an_openai_model_ends_healthy(desk_on_openai):
    server = desk_on_openai
    run = hosting.start("express_desk", INPUT)

    wait_until(lambda: Run.objects.get(pk=run.pk).status == "complete", what="the hosted run on ChatOpenAI")

    handoff = Handoff.objects.filter(run=run).order_by("created_at", "pk").last()
    assert (handoff.sender, handoff.receiver, handoff.verdict) == ("desk", "payments", "HEALTHY")
    assert [r["model"] for r in server.requests] == ["gpt-sidewisp-test"] * 3  # desk, payments twice
    assert {r["stream"] for r in server.requests} == {False}  # hosted runs are observed: not streamed
    assert not server.refused
    assert Order.objects.filter(operation_id=run.operation_id, sku="invoice").count() == 1


# --- the start-up error of a missing provider package --------------------------------------------


def test_a_process_whose_model_provider_package_is_missing_stops_at_start_naming_it(tmp_path):
    # `None` in sys.modules makes the import fail as an uninstalled package does.
    start = "import sys; sys.modules['langchain_openai'] = None; import django; django.setup()"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "sidewisp.settings", "SIDEWISP_MODEL": "openai:gpt-4.1"}

    started = subprocess.run(
        [sys.executable, "-c", start], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120
    )

    assert started.returncode != 0
    assert (
        "ImproperlyConfigured: SIDEWISP_MODEL names provider 'openai': install langchain-openai "
        "(pip install langchain-openai==1.7.4)" in started.stderr
    )


def test_an_installed_provider_package_or_the_scripted_model_passes_the_start_up_check():
    check_model_choice("openai:gpt-4.1")
    check_model_choice("scripted")


def test_a_model_string_naming_no_provider_is_refused_naming_the_setting():
    with pytest.raises(ImproperlyConfigured, match=r"SIDEWISP_MODEL='nobody:model-x' names no model provider"):
        check_model_choice("nobody:model-x")


def test_the_version_the_start_up_error_names_is_the_one_requirements_pin():
    pins = dict(line.split("==") for line in (REPO_ROOT / "requirements.txt").read_text().splitlines() if "==" in line)

    assert {package: pins[package] for package in TESTED_VERSIONS} == TESTED_VERSIONS
