"""The contracts' steps entry (spec §2 v1.2) in the database: import, export, replay, recording and the admin."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from receipts.ingest.contracts import current_contracts, export_document, import_document
from receipts.ingest.recording import record
from receipts.models import AuditEntry, ContractVersion, Handoff

ADD_URL = "/admin/receipts/contractversion/add/"
CHANGE_URL = "/admin/receipts/contractversion/{pk}/change/"
STEPS = {"key": "current_step", "tools": {"specialist": ["escalate", "provide_solution"]}}


def steps_document(steps: dict | None = None) -> dict:
    """A single-agent support team: the collector step hands to the specialist step under steps/1."""
    return {
        "wait_reasons": ["purchase_approval"],
        "routes": {"steps/1": {"collector": {"specialist": ["warranty_status"]}}},
        "steps": {"steps/1": steps or STEPS},
    }


def step_parts(tools: list[str] | None) -> dict[str, dict]:
    destination = {"node_id": "specialist", "started_at": "2026-07-30T10:00:02Z", "attempt_id": "a-1"}
    if tools is not None:
        destination["tools"] = tools
    return {
        "created": {
            "sender": "collector",
            "receiver": "specialist",
            "route_version": "steps/1",
            "tool_call_id": "call_step",
            "at": "2026-07-30T10:00:00Z",
        },
        "reduced": {
            "goto": "specialist",
            "active_agent_before": "collector",
            "active_agent_after": "specialist",
            "graph_scope": "parent",
            "tool_message_ids": ["call_step"],
            "context_keys": ["warranty_status"],
            "at": "2026-07-30T10:00:01Z",
        },
        "destination": destination,
    }


def record_step(handoff_id: str, tools: list[str] | None) -> Handoff:
    for part, value in step_parts(tools).items():
        record(handoff_id=handoff_id, operation_id=f"op-{handoff_id}", part=part, value=value)
    return Handoff.objects.get(handoff_id=handoff_id)


def import_file(tmp_path, document: dict) -> str:
    path = tmp_path / "contracts.json"
    path.write_text(json.dumps(document))
    out = StringIO()
    call_command("import_contracts", str(path), stdout=out)
    return out.getvalue()


# --- import, export and the cached contracts --------------------------------------------


def test_steps_round_trip_through_import_and_export(db, tmp_path):
    import_file(tmp_path, steps_document())
    out = StringIO()

    call_command("export_contracts", stdout=out)

    assert json.loads(out.getvalue())["steps"] == {"steps/1": STEPS}
    assert ContractVersion.objects.get(version="steps/1").steps == STEPS


def test_an_export_without_step_teams_has_no_steps_entry(contracts):
    assert "steps" not in export_document()


def test_the_contracts_recording_reads_know_a_versions_steps(db, tmp_path):
    import_file(tmp_path, steps_document())

    found = current_contracts()

    assert found.steps["steps/1"].key == "current_step"
    assert found.step_tools("steps/1", "specialist") == ("escalate", "provide_solution")


def test_importing_invalid_steps_names_the_field_and_stores_nothing(db, tmp_path):
    document = steps_document({"tools": {"specialist": []}})

    with pytest.raises(CommandError) as caught:
        import_file(tmp_path, document)

    assert "contracts.json: steps.steps/1.key: is required" in str(caught.value)
    assert not ContractVersion.objects.filter(version="steps/1").exists()


def test_importing_steps_for_a_version_routes_does_not_declare_is_refused(db, tmp_path):
    document = steps_document()
    document["steps"]["steps/9"] = STEPS

    with pytest.raises(CommandError) as caught:
        import_file(tmp_path, document)

    assert "steps.steps/9: names a version that routes does not declare" in str(caught.value)


def test_a_first_step_round_trips_through_import_and_export(db, tmp_path):
    steps = {**STEPS, "first": "collector"}
    import_file(tmp_path, steps_document(steps))
    out = StringIO()

    call_command("export_contracts", stdout=out)

    assert json.loads(out.getvalue())["steps"]["steps/1"]["first"] == "collector"
    assert current_contracts().steps["steps/1"].first == "collector"


def test_the_steps_of_a_referenced_version_never_change(db):
    import_document(steps_document())
    record_step("h-ref", ["escalate", "provide_solution"])
    changed = steps_document({"key": "current_step", "tools": {"specialist": ["provide_solution"]}})

    with pytest.raises(ValueError, match=r"^steps\.steps/1: is referenced by handoffs and cannot change"):
        import_document(changed)

    assert ContractVersion.objects.get(version="steps/1").steps == STEPS


def test_the_steps_of_a_version_nothing_references_yet_may_be_replaced(db):
    import_document(steps_document())
    changed = {"key": "current_step", "tools": {"specialist": ["provide_solution"]}}

    result = import_document(steps_document(changed))

    assert result.updated == ("steps/1",)
    assert ContractVersion.objects.get(version="steps/1").steps == changed


def test_importing_the_same_steps_again_changes_nothing(db):
    import_document(steps_document())

    assert import_document(steps_document()).unchanged == ("steps/1",)


# --- the verdict of a recorded step handoff and of a replayed one --------------------------


def test_a_recorded_step_whose_model_call_got_the_declared_tools_is_healthy(db):
    import_document(steps_document())

    assert record_step("h-ok", ["provide_solution", "escalate"]).verdict == "HEALTHY"


@pytest.mark.parametrize("tools", [["provide_solution"], None])
def test_a_recorded_step_whose_model_call_got_other_tools_is_not_started(db, tools):
    import_document(steps_document())

    handoff = record_step("h-wrong", tools)

    assert (handoff.verdict, handoff.boundary) == ("DESTINATION_NOT_STARTED", "destination")


def test_replay_judges_a_steps_tools_against_the_contracts_file(db, tmp_path):
    contracts_path = tmp_path / "contracts.json"
    contracts_path.write_text(json.dumps(steps_document()))
    cases = [
        {
            "schema": "sidewisp.handoff/1",
            "handoff_id": name,
            "operation_id": "op-1",
            **step_parts(tools),
            "expect": want,
        }
        for name, tools, want in [
            ("h-given", ["escalate", "provide_solution"], "HEALTHY"),
            ("h-short", ["escalate"], "DESTINATION_NOT_STARTED"),
            ("h-silent", None, "DESTINATION_NOT_STARTED"),
        ]
    ]
    cases_path = tmp_path / "cases.jsonl"
    cases_path.write_text("\n".join(json.dumps(case) for case in cases) + "\n")
    out = StringIO()

    call_command("replay_receipts", str(cases_path), "--contracts", str(contracts_path), stdout=out)

    assert out.getvalue().splitlines()[-1] == "3 cases, 3 as expected, 0 not"


# --- the admin -------------------------------------------------------------------------------


@pytest.fixture
def admin_(contracts, person):
    """Alex, staff in the admin role group (not a superuser)."""
    return person("alex", "admin", is_staff=True)


def _data(steps: object, version: str = "steps/2") -> dict:
    base = ContractVersion.objects.get(version="routes/3")
    routes = {"collector": {"specialist": ["warranty_status"]}}
    return {"based_on": base.pk, "version": version, "routes": json.dumps(routes), "steps": steps, "note": ""}


def _confirm(client, data: dict):
    review = client.post(ADD_URL, data)
    assert review.status_code == 200, review.content.decode()[:2000]
    digest = re.search(r'name="_confirm" value="([0-9a-f]+)"', review.content.decode()).group(1)
    return review, client.post(ADD_URL, {**data, "_confirm": digest})


def test_the_admin_role_adds_a_version_with_steps_after_reviewing_them(client, admin_):
    client.force_login(admin_)

    review, saved = _confirm(client, _data(json.dumps(STEPS)))

    assert "steps/2 changes the steps" in review.content.decode()
    assert "+  &quot;key&quot;: &quot;current_step&quot;," in review.content.decode()
    assert saved.status_code == 302
    assert ContractVersion.objects.get(version="steps/2").steps == STEPS
    assert AuditEntry.objects.get(action="contracts.add").detail["steps_changed"] is True


def test_the_admin_role_adds_a_version_whose_steps_name_the_first_step(client, admin_):
    client.force_login(admin_)
    steps = {"key": "current_step", "first": "collector", "tools": STEPS["tools"]}

    review, saved = _confirm(client, _data(json.dumps(steps)))

    assert "&quot;first&quot;: &quot;collector&quot;" in review.content.decode()
    assert saved.status_code == 302
    assert ContractVersion.objects.get(version="steps/2").steps == steps
    assert current_contracts().steps["steps/2"].first == "collector"


def test_a_version_added_without_steps_has_none(client, admin_):
    client.force_login(admin_)

    _, saved = _confirm(client, _data(""))

    assert saved.status_code == 302
    assert ContractVersion.objects.get(version="steps/2").steps is None


def test_invalid_steps_are_refused_in_the_admin_with_the_field_named(client, admin_):
    client.force_login(admin_)

    response = client.post(ADD_URL, _data(json.dumps({"key": "current_step", "tool": {}})))

    assert response.status_code == 200
    assert "steps.tool: is not a known field (key, first, tools)" in response.content.decode()
    assert not ContractVersion.objects.filter(version="steps/2").exists()


def test_a_new_version_starts_from_its_bases_steps_and_the_stored_one_shows_them(client, admin_):
    import_document({**steps_document(), "routes": {**export_document()["routes"], **steps_document()["routes"]}})
    stored = ContractVersion.objects.get(version="steps/1")
    client.force_login(admin_)

    form = client.get(ADD_URL, {"from": stored.pk}).content.decode()
    page = client.get(CHANGE_URL.format(pk=stored.pk)).content.decode()

    assert 'value="steps/2"' in form
    assert 'value="escalate, provide_solution"' in form  # issue 30 §5: the steps as rows
    assert "&quot;current_step&quot;" in page
