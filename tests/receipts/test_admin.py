"""Contracts in the admin: admins add new versions (reviewed first), never edit one; evidence is read-only."""

from __future__ import annotations

import json
import re

import pytest

from receipts.ingest.recording import record
from receipts.models import AuditEntry, ContractVersion, Handoff, WaitReason
from tests.factories import healthy_parts

ADD_URL = "/admin/receipts/contractversion/add/"
CHANGE_URL = "/admin/receipts/contractversion/{pk}/change/"
DELETE_URL = "/admin/receipts/contractversion/{pk}/delete/"


@pytest.fixture
def admin_(contracts, person):
    """Alex, staff in the admin role group (not a superuser)."""
    return person("alex", "admin", is_staff=True)


@pytest.fixture
def operator(contracts, person):
    """Oona, staff in the operator role group: no change_limits."""
    return person("oona", "operator", is_staff=True)


@pytest.fixture
def referenced(contracts):
    """routes/1, referenced by a recorded handoff."""
    record(handoff_id="h-1", operation_id="op-1", part="created", value=healthy_parts()["created"])
    return ContractVersion.objects.get(version="routes/1")


def _routes(**changes) -> dict:
    routes = json.loads(json.dumps(ContractVersion.objects.get(version="routes/3").routes))
    for sender, receivers in changes.items():
        routes[sender] = receivers
    return routes


def _data(version="routes/4", routes=None, based_on=None, **extra) -> dict:
    base = based_on or ContractVersion.objects.get(version="routes/3")
    routes = _routes() if routes is None else routes
    return {"based_on": base.pk, "version": version, "routes": json.dumps(routes), "note": "", **extra}


def _confirm(client, data: dict):
    """Submit the add form, then confirm its review page as the admin would."""
    review = client.post(ADD_URL, data)
    assert review.status_code == 200, review.content.decode()[:2000]
    digest = re.search(r'name="_confirm" value="([0-9a-f]+)"', review.content.decode()).group(1)
    return client.post(ADD_URL, {**data, "_confirm": digest})


def test_the_admin_role_opens_the_add_form_prefilled_from_the_latest_version(client, admin_):
    client.force_login(admin_)

    response = client.get(ADD_URL)

    page = response.content.decode()
    assert response.status_code == 200
    assert 'value="routes/4"' in page
    assert 'value="coder"' in page  # routes/3's copy, the latest version, in a route row


def test_the_add_form_starts_from_a_chosen_version(client, admin_):
    client.force_login(admin_)
    first = ContractVersion.objects.get(version="routes/1")

    page = client.get(ADD_URL, {"from": first.pk}).content.decode()

    assert 'value="routes/2"' not in page  # taken: the next free name
    assert 'value="routes/4"' in page
    assert 'value="coder"' not in page


def test_the_admin_role_adds_a_version_after_reviewing_it(client, admin_):
    client.force_login(admin_)
    data = _data(routes=_routes(sales={"billing": ["order_id"], "support": ["ticket_id"]}))

    response = _confirm(client, data)

    assert response.status_code == 302
    saved = ContractVersion.objects.get(version="routes/4")
    assert saved.routes["sales"] == {"billing": ["order_id"], "support": ["ticket_id"]}
    assert saved.created_by == admin_
    entry = AuditEntry.objects.get(action="contracts.add")
    assert (entry.actor, entry.object_id, entry.outcome) == (admin_, "routes/4", "done")


def test_nothing_is_saved_before_the_review_is_confirmed(client, admin_):
    client.force_login(admin_)

    response = client.post(ADD_URL, _data())

    assert response.status_code == 200
    assert "Review the new contract version routes/4" in response.content.decode()
    assert not ContractVersion.objects.filter(version="routes/4").exists()


def test_a_confirmation_of_other_routes_is_not_a_confirmation(client, admin_):
    client.force_login(admin_)
    review = client.post(ADD_URL, _data()).content.decode()
    digest = re.search(r'name="_confirm" value="([0-9a-f]+)"', review).group(1)

    response = client.post(ADD_URL, {**_data(routes=_routes(sales={})), "_confirm": digest})

    assert response.status_code == 200
    assert not ContractVersion.objects.filter(version="routes/4").exists()


def test_the_review_lists_the_routes_that_change(client, admin_):
    client.force_login(admin_)
    routes = _routes(
        triage={
            "sales": ["request_type", "customer_tier"],
            "support": ["request_type", "ticket_id"],
            "research": ["question"],
        },
        sales={},
    )

    page = client.post(ADD_URL, _data(routes=routes)).content.decode()

    table = page[page.index('id="route-changes"') : page.index("</table>", page.index('id="route-changes"'))]
    rows = re.findall(r"<tr><td><code>(\w+)</code></td><td><code>(\w+)</code></td><td>([\w ]+)</td>", table)
    assert rows == [
        ("sales", "billing", "removed"),
        ("triage", "coder", "removed"),
        ("triage", "research", "added"),
        ("triage", "sales", "keys changed"),
    ]
    assert "(drops consent_status, region)" in table
    assert "-      &quot;consent_status&quot;," in page  # the diff against routes/3


def test_invalid_routes_are_refused_with_the_field_named(client, admin_):
    client.force_login(admin_)

    response = client.post(ADD_URL, _data(routes={"triage": {"sales": "request_type"}}))

    assert response.status_code == 200
    assert "routes.triage.sales" in response.content.decode()
    assert not ContractVersion.objects.filter(version="routes/4").exists()


def test_an_invalid_version_name_is_refused_with_the_field_named(client, admin_):
    client.force_login(admin_)

    response = client.post(ADD_URL, _data(version="/srv/routes"))

    assert response.status_code == 200
    assert "version: has a version name that" in response.content.decode()
    assert not ContractVersion.objects.filter(version="/srv/routes").exists()


def test_a_taken_version_name_is_refused(client, admin_):
    client.force_login(admin_)

    response = client.post(ADD_URL, _data(version="routes/1"))

    assert "Contract version with this Version already exists." in response.content.decode()


def test_the_admin_role_cannot_edit_an_existing_version(client, admin_, referenced):
    client.force_login(admin_)

    page = client.get(CHANGE_URL.format(pk=referenced.pk)).content.decode()
    refused = client.post(CHANGE_URL.format(pk=referenced.pk), _data(version="routes/1"))

    assert f"New version from {referenced}" in page
    assert 'name="_save"' not in page
    assert refused.status_code == 403
    referenced.refresh_from_db()
    assert referenced.routes["triage"]["sales"] == ["request_type", "customer_tier", "consent_status"]


def test_the_admin_role_cannot_delete_a_referenced_version(client, admin_, referenced):
    client.force_login(admin_)

    response = client.post(DELETE_URL.format(pk=referenced.pk), {"post": "yes"})

    assert response.status_code == 403
    assert ContractVersion.objects.filter(pk=referenced.pk).exists()


def test_not_even_a_superuser_deletes_a_referenced_version(admin_client, referenced):
    response = admin_client.post(DELETE_URL.format(pk=referenced.pk), {"post": "yes"})

    assert response.status_code == 403
    assert ContractVersion.objects.filter(pk=referenced.pk).exists()


def test_a_user_without_change_limits_cannot_add_and_the_attempt_is_audited(client, operator):
    client.force_login(operator)

    response = client.post(ADD_URL, _data())

    assert response.status_code == 403
    assert not ContractVersion.objects.filter(version="routes/4").exists()
    assert AuditEntry.objects.get(action="contracts.add").outcome == "denied"


def test_the_admin_role_adds_a_wait_reason_on_the_contract_form_but_cannot_rename_one(client, admin_):
    client.force_login(admin_)
    stored = sorted(WaitReason.objects.values_list("code", flat=True))
    rows = [*stored, "data_export"]
    reasons = {f"wait_reasons-{i}-code": code for i, code in enumerate(rows)}
    reasons |= {f"wait_reasons-{len(rows) - 1}-description": "exports"}

    review = client.post(ADD_URL, _data(**reasons))
    added = _confirm(client, _data(**reasons))
    reason = WaitReason.objects.get(code="data_export")
    refused = client.post(f"/admin/receipts/waitreason/{reason.pk}/change/", {"code": "renamed", "description": ""})
    elsewhere = client.post("/admin/receipts/waitreason/add/", {"code": "other_place", "description": ""})

    assert "Saving routes/4 adds the wait reasons data_export (for every version)." in review.content.decode()
    assert added.status_code == 302
    assert reason.description == "exports"
    assert refused.status_code == 403
    assert elsewhere.status_code == 403  # one place to declare them: the contract version form
    assert WaitReason.objects.filter(code="data_export").exists()
    assert not WaitReason.objects.filter(code__in=["renamed", "other_place"]).exists()


def test_the_admin_lists_show_iso_8601_times(client, admin_):
    client.force_login(admin_)
    version = ContractVersion.objects.get(version="routes/1")

    page = client.get("/admin/receipts/contractversion/").content.decode()

    assert version.created_at.isoformat(timespec="seconds") in page


def test_the_admin_is_branded(client, admin_):
    client.force_login(admin_)

    page = client.get("/admin/").content.decode()

    assert "<title>Limits, contracts and evidence | Sidewisp administration</title>" in page
    assert '<a href="/admin/">Sidewisp administration</a>' in page
    assert "/admin/receipts/contractversion/" in page


def test_the_add_form_offers_only_save(client, admin_):
    client.force_login(admin_)

    page = client.get(ADD_URL).content.decode()

    assert 'name="_save"' in page
    assert 'name="_addanother"' not in page
    assert 'name="_continue"' not in page


def test_evidence_is_read_only_in_the_admin(admin_client, referenced):
    handoff = Handoff.objects.get()

    response = admin_client.post(f"/admin/receipts/handoff/{handoff.pk}/delete/", {"post": "yes"})
    page = admin_client.get(f"/admin/receipts/handoff/{handoff.pk}/change/").content.decode()

    assert response.status_code == 403
    assert Handoff.objects.count() == 1
    assert not re.search(r'name="_(save|addanother|continue)"', page)


def test_the_audit_log_offers_no_save_in_the_admin(admin_client, admin_):
    entry = AuditEntry.objects.create(actor_name="alex", action="limits.change", object_type="limits", object_id="2")

    page = admin_client.get(f"/admin/receipts/auditentry/{entry.pk}/change/").content.decode()

    assert not re.search(r'name="_(save|addanother|continue)"', page)


def test_choosing_based_on_reloads_the_form_from_that_version(client, admin_):
    client.force_login(admin_)
    first = ContractVersion.objects.get(version="routes/1")

    page = client.get(ADD_URL).content.decode()
    chosen = client.get(ADD_URL, {"from": first.pk}).content.decode()

    # The select carries the hook its script follows: a change reloads the page with ?from=<the chosen id>.
    assert re.search(r'<select name="based_on"[^>]*data-reload-param="from"', page)
    assert "/static/js/admin_based_on.js" in page
    assert f'<option value="{first.pk}" selected>' in chosen
    sender, receivers = next(iter(first.routes.items()))  # issue 30 §5: the routes as rows
    assert f'name="routes-0-sender" value="{sender}"' in chosen
    assert f'name="routes-0-receiver" value="{next(iter(receivers))}"' in chosen


def test_choosing_based_on_nothing_starts_from_empty_routes(client, admin_):
    client.force_login(admin_)

    page = client.get(ADD_URL, {"from": "none"}).content.decode()

    assert '<option value="" selected>(nothing: start empty)</option>' in page
    assert 'value="coder"' not in page
    assert 'name="routes-0-sender" value=""' in page  # no route: the rows start blank
