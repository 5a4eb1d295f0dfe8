"""A hosted graph ships the routes it follows: added when its run starts, never edited (issue 28 §8)."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from agents.host import hosting
from agents.host.entries import load
from receipts.models import AuditEntry, ContractVersion, Run, WaitReason
from tests.agents.hosted_graph import CONTRACTS, INPUT

pytestmark = pytest.mark.django_db

DESK = json.dumps({"desk": "tests/agents/hosted_graph.py:make_graph"})


@pytest.fixture
def desk_alone(settings):
    settings.SIDEWISP_GRAPHS = DESK
    ContractVersion.objects.all().delete()
    WaitReason.objects.all().delete()


def test_starting_a_run_adds_the_contract_its_graph_ships(desk_alone):
    hosting.start("desk", INPUT)

    assert ContractVersion.objects.get(version="desk/1").routes == CONTRACTS["desk/1"]
    assert {"irreversible_choice", "purchase_approval"} <= set(WaitReason.objects.values_list("code", flat=True))
    shipped = AuditEntry.objects.get(action="contracts.ship")
    assert (shipped.actor_name, shipped.outcome, shipped.detail["added"]) == ("system", "done", ["desk/1", "shop/1"])


def test_the_same_shipped_contract_again_changes_nothing(desk_alone):
    hosting.start("desk", INPUT)
    first = list(ContractVersion.objects.values_list("pk", "version", "routes"))

    hosting.start("desk", INPUT)

    assert list(ContractVersion.objects.values_list("pk", "version", "routes")) == first
    assert AuditEntry.objects.filter(action="contracts.ship").count() == 1


def test_a_shipped_contract_keeps_the_wait_reasons_already_stored(desk_alone):
    WaitReason.objects.create(code="secret_disclosure")

    hosting.start("desk", INPUT)

    assert WaitReason.objects.filter(code="secret_disclosure").exists()


def test_other_routes_under_a_stored_version_are_refused_in_words_and_nothing_starts(desk_alone):
    ContractVersion.objects.create(version="desk/1", routes={"desk": {"payments": ["invoice_id", "amount"]}})

    with pytest.raises(ValueError, match="desk/1") as refused:
        hosting.start("desk", INPUT)

    assert "versions are never edited" in str(refused.value)
    assert "ship the new content under a new version name" in str(refused.value)
    assert ContractVersion.objects.get(version="desk/1").routes == {"desk": {"payments": ["invoice_id", "amount"]}}
    assert not ContractVersion.objects.filter(version="shop/1").exists()  # all of it or nothing
    assert not Run.objects.exists()


def test_start_run_says_why_a_conflicting_contract_is_refused(desk_alone, capsys):
    ContractVersion.objects.create(version="desk/1", routes={"desk": {"cashier": []}})
    stderr = StringIO()

    with pytest.raises(SystemExit) as exited:
        call_command("start_run", "desk", "--input", json.dumps(INPUT), stderr=stderr)

    assert exited.value.code == 2
    assert "routes.desk/1: graph desk" in stderr.getvalue()
    assert "versions are never edited" in stderr.getvalue()


def test_an_entry_names_its_contracts_file(settings, tmp_path):
    document = {"wait_reasons": ["irreversible_choice"], "routes": {"desk/7": {"desk": {"payments": []}}}}
    (tmp_path / "desk.json").write_text(json.dumps(document))
    entry = {"graph": "tests/agents/hosted_graph.py:make_express_graph", "contracts": str(tmp_path / "desk.json")}
    settings.SIDEWISP_GRAPHS = json.dumps({"express": entry})

    hosting.start("express", INPUT)

    assert ContractVersion.objects.get(version="desk/7").routes == {"desk": {"payments": []}}


def test_a_shipped_contract_that_is_not_one_stops_start_up_naming_the_entry(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"wait_reasons": [], "routes": {"desk/1": {"desk": ["payments"]}}}))
    entry = {"graph": "tests/agents/hosted_graph.py:make_graph", "contracts": str(tmp_path / "bad.json")}

    with pytest.raises(ImproperlyConfigured, match=r"entry 'desk' contracts: routes\.desk/1\.desk"):
        load({"desk": entry})


def test_import_contracts_add_keeps_the_stored_wait_reasons_and_refuses_a_change(tmp_path):
    WaitReason.objects.create(code="site_visit")
    path = tmp_path / "teams.json"
    path.write_text(json.dumps({"wait_reasons": ["purchase_approval"], "routes": {"teams/1": {"alice": {"bob": []}}}}))

    call_command("import_contracts", "--add", str(path), stdout=StringIO())
    call_command("import_contracts", "--add", str(path), stdout=StringIO())

    assert set(WaitReason.objects.values_list("code", flat=True)) >= {"site_visit", "purchase_approval"}
    path.write_text(json.dumps({"wait_reasons": [], "routes": {"teams/1": {"alice": {"carol": []}}}}))
    with pytest.raises(CommandError, match=r"teams\.json ships other routes"):
        call_command("import_contracts", "--add", str(path), stdout=StringIO())
    assert ContractVersion.objects.get(version="teams/1").routes == {"alice": {"bob": []}}
