"""The contract version form as rows (issue 30 §5): routes, steps and wait reasons typed as rows round-trip to the
JSON export; an imported document replaces the rows; an import that is not JSON names its line and column; an
invalid wait reason row is refused in words on its row and in the summary."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest

from receipts.models import AuditEntry, ContractVersion, WaitReason

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


NEW_REASON = ("site_visit", "A person must visit the site first")


@pytest.fixture
def admin_(contracts, person):
    return person("alex", "admin", is_staff=True)


def _stored_reasons() -> list[str]:
    return sorted(WaitReason.objects.values_list("code", flat=True))


def _document() -> dict:
    """DOCUMENT with the contracts' wait reasons: the stored ones and one new."""
    return {**DOCUMENT, "wait_reasons": sorted({*_stored_reasons(), NEW_REASON[0]})}


def _reason_rows(rows: list[tuple[str, str]]) -> dict[str, str]:
    data = {}
    for i, (code, description) in enumerate([*rows, ("", "")]):
        data |= {f"wait_reasons-{i}-code": code, f"wait_reasons-{i}-description": description}
    return data


def _rows() -> dict[str, str]:
    """DOCUMENT as the rows form posts it: a row per route, per step and per wait reason (a blank row, left out)."""
    data = {"version": "rows/1", "note": "typed as rows", "based_on": ""}
    data |= _reason_rows([*((code, "") for code in _stored_reasons()), NEW_REASON])
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
    assert json.loads(exported.content) == _document()
    assert WaitReason.objects.get(code="site_visit").description == NEW_REASON[1]
    assert AuditEntry.objects.get(action="contracts.add").detail["wait_reasons_added"] == ["site_visit"]


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
    assert re.search(
        r'name="wait_reasons-(\d+)-code" value="site_visit"[^>]* readonly>.*?'
        r'name="wait_reasons-\1-description" value="A person must visit the site first"',
        page,
        re.S,
    )


def test_an_exported_document_imports_back_as_a_new_version(client, admin_):
    client.force_login(admin_)
    document = {**_document(), "version": "rows/2"}

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


def test_an_invalid_wait_reason_row_is_refused_in_words_on_its_row_and_in_the_summary(client, admin_):
    client.force_login(admin_)
    stored = [(code, "") for code in _stored_reasons()]
    data = {**_rows(), **_reason_rows([*stored, ("", "Visit first"), ("sk-ant-api03-" + "a" * 40, "")])}
    bad = len(stored)  # the row with a meaning and no code

    response = client.post(ADD_URL, data)

    page = response.content.decode()
    summary = page.split('id="error-summary"', 1)[1].split("</div>", 1)[0]
    row = page.split(f'name="wait_reasons-{bad}-code"', 1)[1].split("</tr>", 1)[0]
    said = (
        f"Wait reason {bad + 1}: the meaning “Visit first” has no code; type the code a wait names, or clear the row."
    )
    assert response.status_code == 200
    assert 'aria-invalid="true"' in row and said in unescape(row)
    assert f'<a href="#id_wait_reasons">Wait reasons</a>: {said}' in unescape(summary)
    assert re.search(rf"Wait reason {bad + 2}: the code [^<]+", page)  # the credential-shaped code, in words
    assert "sk-ant-api03" not in unescape(summary)
    assert not ContractVersion.objects.filter(version="rows/1").exists()


def test_a_stored_wait_reason_cannot_be_left_out(client, admin_):
    client.force_login(admin_)
    kept = _stored_reasons()
    document = {**DOCUMENT, "version": "rows/4", "wait_reasons": kept[1:]}

    response = client.post(ADD_URL, {"based_on": "", "version": "x", "note": "", "document": json.dumps(document)})

    assert response.status_code == 200
    assert f"{kept[0]} cannot be left out" in unescape(response.content.decode())
    assert not ContractVersion.objects.filter(version="rows/4").exists()
    assert _stored_reasons() == kept


def test_a_form_posting_no_wait_reason_rows_keeps_the_stored_ones(client, admin_):
    client.force_login(admin_)
    kept = _stored_reasons()
    data = {k: v for k, v in _rows().items() if not k.startswith("wait_reasons-")}

    saved = _confirmed(client, data)

    assert saved.status_code == 302
    assert _stored_reasons() == kept


def test_a_new_wait_reason_needs_the_permission_to_add_one_and_the_refusal_is_audited(client, contracts, db):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    editor = get_user_model().objects.create_user(username="eddie", is_staff=True)
    editor.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="receipts",
            codename__in=["add_contractversion", "view_contractversion", "change_limits"],
        )
    )
    client.force_login(editor)

    refused = client.post(ADD_URL, _rows())  # refused before the review: the review would offer a save

    assert refused.status_code == 403
    assert not ContractVersion.objects.filter(version="rows/1").exists()
    assert not WaitReason.objects.filter(code="site_visit").exists()
    assert AuditEntry.objects.get(action="contracts.add").outcome == "denied"
