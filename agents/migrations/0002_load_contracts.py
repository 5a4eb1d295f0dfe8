"""Load agents/contracts.json so a fresh database classifies the demo team's handoffs."""

import json
from pathlib import Path

from django.db import migrations

CONTRACTS_FILE = Path(__file__).resolve().parent.parent / "contracts.json"


def load_contracts(apps, schema_editor):
    ContractVersion = apps.get_model("receipts", "ContractVersion")
    WaitReason = apps.get_model("receipts", "WaitReason")
    document = json.loads(CONTRACTS_FILE.read_text())
    # Versions are never edited in place: an existing version is left as it is.
    for version, routes in document["routes"].items():
        ContractVersion.objects.get_or_create(version=version, defaults={"routes": routes})
    for code in document["wait_reasons"]:
        WaitReason.objects.get_or_create(code=code)


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0001_initial"),
        ("receipts", "0001_initial"),
    ]

    operations = [migrations.RunPython(load_contracts, migrations.RunPython.noop)]
