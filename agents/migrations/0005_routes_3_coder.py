"""Contract version routes/3 (routes/2 plus triage → coder) and the destructive_command wait reason."""

import json
from pathlib import Path

from django.db import migrations

CONTRACTS_FILE = Path(__file__).resolve().parent.parent / "contracts.json"
VERSION = "routes/3"
WAIT_REASON = "destructive_command"


def add_routes_3(apps, schema_editor):
    ContractVersion = apps.get_model("receipts", "ContractVersion")
    WaitReason = apps.get_model("receipts", "WaitReason")
    routes = json.loads(CONTRACTS_FILE.read_text())["routes"][VERSION]
    # A version is never edited in place: an existing routes/3 is left as it is.
    ContractVersion.objects.get_or_create(version=VERSION, defaults={"routes": routes})
    WaitReason.objects.get_or_create(code=WAIT_REASON)


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0004_default_approval_owner"),
        ("receipts", "0001_initial"),
    ]

    operations = [migrations.RunPython(add_routes_3, migrations.RunPython.noop)]
