"""Settled verdicts (issue 18, spec v1.2 "Settled"): `Handoff.settled_at`, set for every existing handoff.

The handoffs recorded before this change were judged, alerted and exported as final: they stay final,
so their runs' stored health and summaries do not change either.
"""

from django.db import migrations, models
from django.db.models import F


def settle_existing(apps, schema_editor):
    handoffs = apps.get_model("receipts", "Handoff")
    handoffs.objects.filter(settled_at__isnull=True).update(settled_at=F("updated_at"))


class Migration(migrations.Migration):
    dependencies = [("receipts", "0015_report_kinds_for_team_shapes")]

    operations = [
        migrations.AddField(
            model_name="handoff",
            name="settled_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(settle_existing, migrations.RunPython.noop),
    ]
