"""Fixtures the observed-team tests share: the teams' contract version, and each case driven both ways."""

from __future__ import annotations

import asyncio

import pytest

from receipts.models import ContractVersion
from tests.agents import teams
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
