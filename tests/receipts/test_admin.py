from __future__ import annotations

import pytest

from receipts.models import ContractVersion, Handoff
from receipts.recording import record
from tests.factories import healthy_parts

CHANGE_URL = "/admin/receipts/contractversion/{pk}/change/"


@pytest.fixture
def admin_client_(admin_client, contracts):
    return admin_client


def _post(client, contract: ContractVersion, **extra):
    data = {"version": contract.version, "routes": '{"triage": {"sales": ["request_type"]}}', "note": "", **extra}
    return client.post(CHANGE_URL.format(pk=contract.pk), data)


@pytest.mark.django_db
def test_an_unreferenced_version_can_be_edited(admin_client_):
    version = ContractVersion.objects.get(version="routes/1")
    response = _post(admin_client_, version)
    assert response.status_code == 302
    version.refresh_from_db()
    assert version.routes == {"triage": {"sales": ["request_type"]}}


@pytest.mark.django_db
def test_a_referenced_version_cannot_be_edited_in_place(admin_client_):
    record(handoff_id="h-1", operation_id="op-1", part="created", value=healthy_parts()["created"])
    version = ContractVersion.objects.get(version="routes/1")
    response = _post(admin_client_, version)
    assert response.status_code == 200
    assert "is referenced by handoffs and cannot change" in response.content.decode()
    version.refresh_from_db()
    assert version.routes["triage"]["sales"] == ["request_type", "customer_tier", "consent_status"]


@pytest.mark.django_db
def test_a_referenced_version_can_be_saved_as_a_new_version(admin_client_):
    record(handoff_id="h-1", operation_id="op-1", part="created", value=healthy_parts()["created"])
    version = ContractVersion.objects.get(version="routes/1")
    response = _post(admin_client_, version, version="routes/next", _saveasnew="Save as new")
    assert response.status_code == 302
    assert ContractVersion.objects.get(version="routes/next").routes == {"triage": {"sales": ["request_type"]}}
    assert ContractVersion.objects.get(version="routes/1").routes["triage"]["sales"][0] == "request_type"


@pytest.mark.django_db
def test_invalid_routes_are_refused_with_the_field_named(admin_client_):
    version = ContractVersion.objects.get(version="routes/1")
    response = _post(admin_client_, version, routes='{"triage": {"sales": "request_type"}}')
    assert response.status_code == 200
    assert "routes.triage.sales" in response.content.decode()


@pytest.mark.django_db
def test_evidence_is_read_only_in_the_admin(admin_client_):
    record(handoff_id="h-1", operation_id="op-1", part="created", value=healthy_parts()["created"])
    handoff = Handoff.objects.get()
    response = admin_client_.post(f"/admin/receipts/handoff/{handoff.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert Handoff.objects.count() == 1
