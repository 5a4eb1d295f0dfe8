"""Dry runs: the tool emulator answers for the tools, nothing changes, and every trace says it was a dry run."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from agents.demo.contracts import install_team_contracts
from agents.demo.scenarios import SCENARIOS, create_run
from agents.host import runner, workspaces
from agents.host.checkpoints import checkpointer
from agents.host.scripted import EMULATED_RESULTS
from agents.limits import LimitsError, effective_stack, team_checks, validate_document
from agents.models import Order, Refund, Ticket
from receipts.models import Receipt, Run


@pytest.fixture
def contracts(transactional_db):
    install_team_contracts()


@pytest.fixture(autouse=True)
def var_dir(settings, tmp_path):
    settings.VAR_DIR = tmp_path / "var"
    return settings.VAR_DIR


def _domain_rows() -> int:
    return Order.objects.count() + Ticket.objects.count() + Refund.objects.count()


def _tool_results(run: Run, agent: str) -> list[str]:
    with checkpointer() as saver:
        graph = SCENARIOS[run.scenario].build(saver, dry_run=True).graph
        values = graph.get_state(runner.graph_config(run)).values
    return [str(m.content) for m in values["messages"] if m.type == "tool" and not m.name.startswith("transfer_")]


@pytest.mark.parametrize("name", ["healthy_purchase", "healthy_support", "healthy_billing_chain"])
def test_a_dry_run_changes_nothing_in_the_domain_store(contracts, name):
    run = create_run(name, dry_run=True)

    runner.start_run(run)

    assert _domain_rows() == 0
    assert Run.objects.get(pk=run.pk).dry_run is True
    # It still records its receipts like a real run.
    assert Receipt.objects.filter(handoff__run=run, part="destination").exists()


def test_a_real_run_of_the_same_scenario_does_change_the_store(contracts):
    run = create_run("healthy_purchase")

    runner.start_run(run)

    assert Order.objects.filter(operation_id=run.operation_id).count() == 1


def test_the_scripted_emulator_answers_in_the_shape_of_the_real_tool(contracts):
    run = create_run("healthy_support", dry_run=True)

    runner.start_run(run)

    (result,) = _tool_results(run, "support")
    # update_ticket's emulated answer, for the ticket id create_ticket's emulated answer made up.
    assert result.startswith("ticket_id=T-dry-")
    assert result.endswith(" state=resolved")


def test_a_dry_run_of_the_coder_runs_no_command_and_creates_no_workspace(contracts):
    run = create_run("coder_fixes_function", dry_run=True)

    runner.start_run(run)

    assert not workspaces.workspace_path(run.operation_id).exists()
    assert EMULATED_RESULTS["shell"] in _tool_results(run, "coder")


def test_every_event_of_a_dry_run_says_so(contracts, monkeypatch):
    from receipts.ingest import broadcast

    published = []
    monkeypatch.setattr(broadcast, "publish", published.append)
    run = create_run("healthy_purchase", dry_run=True)

    runner.start_run(run)

    assert published
    assert {event["dry_run"] for event in published} == {True}


def test_the_run_page_shows_the_dry_run_badge(contracts, client, django_user_model):
    run = create_run("healthy_purchase", dry_run=True)
    runner.start_run(run)
    viewer = django_user_model.objects.create_user("viewer")
    viewer.user_permissions.add(Permission.objects.get(codename="view_dashboard"))
    client.force_login(viewer)

    page = client.get(f"/runs/{run.pk}/").content.decode()

    assert "dry run" in page
    assert "this run took no external action" in page


def test_the_effective_stack_of_a_dry_run_shows_the_emulator_and_its_tools(contracts):
    run = create_run("healthy_purchase", dry_run=True)
    runner.start_run(run)

    stacks = {row["agent"]: row["stack"] for row in effective_stack(run)["agents"]}

    emulator = [row for row in stacks["sales"] if row["middleware"] == "LLMToolEmulator"]
    assert emulator[0]["args"]["tools"] == ["check_inventory", "place_order", "confirm_with_supplier"]
    triage = [row for row in stacks["triage"] if row["middleware"] == "LLMToolEmulator"]
    assert triage[0]["args"]["tools"] == ["create_ticket"]  # transfers are never emulated


def test_a_real_runs_stack_has_no_emulator(contracts):
    run = create_run("healthy_purchase")
    runner.start_run(run)

    rows = [row for agent in effective_stack(run)["agents"] for row in agent["stack"]]

    assert "LLMToolEmulator" not in {row["middleware"] for row in rows}


def test_a_chosen_emulation_list_must_cover_every_tool_with_effects(db):
    document = {"agents": {"sales": {"dry_run": {"emulate": ["check_inventory"]}}}}

    with pytest.raises(LimitsError) as caught:
        validate_document(document, team_checks())

    assert any(
        e.startswith("agents.sales.dry_run.emulate: a dry run must emulate every tool with effects")
        for e in caught.value.errors
    )


def test_a_chosen_emulation_list_can_leave_a_harmless_tool_real(db):
    emulate = ["place_order", "confirm_with_supplier"]
    document = {"agents": {"sales": {"dry_run": {"emulate": emulate}}}}

    assert validate_document(document, team_checks())["agents"]["sales"]["dry_run"]["emulate"] == emulate
