"""Fill Run.health and Run.health_reasons for runs recorded before receipts.ingest.health existed."""

from __future__ import annotations

from django.db import migrations


def fill(apps, schema_editor) -> None:
    from receipts.ingest.health import refresh_all

    refresh_all(
        run_model=apps.get_model("receipts", "Run"),
        handoffs=apps.get_model("receipts", "Handoff"),
        reports=apps.get_model("receipts", "MiddlewareReport"),
    )


class Migration(migrations.Migration):
    dependencies = [("receipts", "0009_admin_adds_contract_versions")]

    operations = [migrations.RunPython(fill, migrations.RunPython.noop)]
