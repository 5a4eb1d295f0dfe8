"""The contract version form as rows (issue 30 §5): routes and steps typed as rows round-trip to the JSON
export; an imported document replaces the rows; an import that is not JSON names its line and column."""

from __future__ import annotations

import json
import re

import pytest

from receipts.models import ContractVersion

ADD_URL = "/admin/receipts/contractversion/add/"
EXPORT_URL = "/admin/receipts/contractversion/{pk}/export.json"
DOCUMENT = {
    "version": "rows/1",
    "routes": {"triage": {"billing": ["order_id", "customer_id"], "support": []}, "billing": {"triage": ["ticket"]}},
    "steps": {
        "key": "current_step",
        "first": "collect",
        "tools": {"collect": ["lookup"], "solve": ["refund", "email"]},
    },
}


@pytest.fixture
def admin_(contracts, person):
    return person("alex", "admin", is_staff=True)


def _rows() -> dict[str, str]:
    """DOCUMENT as the rows form posts it: a row per route and per step (and a blank row, left out)."""
    data = {"version": "rows/1", "note": "typed as rows", "based_on": ""}
    routes = [(s, r, keys) for s, receivers in DOCUMENT["routes"].items() for r, keys in receivers.items()]
    for i, (sender, receiver, keys) in enumerate([*routes, ("", "", "")]):
        data |= {f"routes-{i}-sender": sender, f"routes-{i}-receiver": receiver, f"routes-{i}-keys": ", ".join(keys)}
    data |= {"steps-key": "current_step", "steps-first": "collect"}
    for i, (step, tools) in enumerate([*DOCUMENT["steps"]["tools"].items(), ("", [])]):
        data |= {f"steps-{i}-step": step, f"steps-{i}-tools": ", ".join(tools)}
    return data


def _confirmed(client, data: dict):
    review = client.post(ADD_URL, data)
    digest = re.search(r'name="_confirm" value="([0-9a-f]+)"', review.content.decode())
    assert digest is not None, review.content.decode()[:2000]
    return client.post(ADD_URL, {**data, "_confirm": digest.group(1)})


def test_routes_and_steps_typed_as_rows_export_as_the_same_document(client, admin_):
    client.force_login(admin_)

    saved = _confirmed(client, _rows())
    version = ContractVersion.objects.get(version="rows/1")
    exported = client.get(EXPORT_URL.format(pk=version.pk))

    assert saved.status_code == 302
    assert exported["Content-Disposition"] == 'attachment; filename="contract-rows-1.json"'
    assert json.loads(exported.content) == DOCUMENT


def test_the_form_shows_a_saved_version_as_the_rows_it_was_typed_in(client, admin_):
    client.force_login(admin_)
    _confirmed(client, _rows())
    version = ContractVersion.objects.get(version="rows/1")

    page = client.get(ADD_URL, {"from": version.pk}).content.decode()

    # Rows in the stored order (PostgreSQL's jsonb keeps its own order of keys).
    assert re.search(
        r'name="routes-(\d+)-sender" value="triage".*?name="routes-\1-receiver" value="billing"', page, re.S
    )
    assert re.search(r'name="routes-\d+-keys" value="order_id, customer_id"', page)
    assert 'name="steps-first" value="collect"' in page
    assert re.search(r'name="steps-(\d+)-step" value="solve".*?name="steps-\1-tools" value="refund, email"', page, re.S)


def test_an_exported_document_imports_back_as_a_new_version(client, admin_):
    client.force_login(admin_)
    document = {**DOCUMENT, "version": "rows/2"}

    _confirmed(client, {"based_on": "", "version": "ignored", "note": "imported", "document": json.dumps(document)})

    version = ContractVersion.objects.get(version="rows/2")
    assert json.loads(client.get(EXPORT_URL.format(pk=version.pk)).content) == document


def test_an_import_that_is_not_json_names_its_line_and_column(client, admin_):
    client.force_login(admin_)
    broken = '{\n  "version": "rows/3",\n  "routes": {"triage": {"billing": ["order_id",]}}\n}'

    response = client.post(ADD_URL, {"based_on": "", "version": "rows/3", "note": "", "document": broken})

    page = response.content.decode()
    assert response.status_code == 200
    assert "The JSON is not valid at line 3, column 48: Expecting value." in page
    assert 'id="error-summary"' in page and '<a href="#id_document">Import JSON</a>' in page
    assert not ContractVersion.objects.filter(version="rows/3").exists()


def test_a_route_row_without_a_receiver_is_refused_naming_the_routes(client, admin_):
    client.force_login(admin_)
    data = {**_rows(), "routes-0-receiver": ""}

    response = client.post(ADD_URL, data)

    assert response.status_code == 200
    assert '<a href="#id_routes">Routes</a>' in response.content.decode()
    assert not ContractVersion.objects.filter(version="rows/1").exists()
