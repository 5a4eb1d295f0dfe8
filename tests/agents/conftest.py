"""Fixtures the observed-team tests share: the teams' contract version, each case driven both ways, a real
server for apps in other processes, and the fresh virtualenv of the agent package."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from receipts.models import ContractVersion
from tests.agents import fresh_venv, teams
from tests.agents.stored import aobserve, observe


@pytest.fixture
def team_contracts(transactional_db, contracts):
    ContractVersion.objects.create(version=teams.ROUTE_VERSION, routes=teams.ROUTES)


@pytest.fixture(params=["sync", "async"])
def drive(request):
    """observe, or aobserve driven by asyncio.run: the same cases both ways."""

    def _drive(graph, graph_input, config, **kwargs):
        if request.param == "sync":
            return observe(graph, graph_input, config, **kwargs)
        return asyncio.run(aobserve(graph, graph_input, config, **kwargs))

    return _drive


@pytest.fixture
def sidewisp_server(transactional_db, celery_isolation, contracts):
    """daphne on the test database (kill() and start() it at will), with the swarm team's contracts."""
    from tests.e2e.test_live_pages import Server

    ContractVersion.objects.create(version=teams.ROUTE_VERSION, routes=teams.ROUTES)
    server = Server(celery_isolation)
    server.env.update({"DEBUG": "1", "LOG_LEVEL": "ERROR"})
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def venv_python(tmp_path_factory) -> Path:
    """The Python of a new virtualenv holding the built agent package and its dependencies only."""
    return fresh_venv.build(tmp_path_factory.mktemp("agent-venv"))
