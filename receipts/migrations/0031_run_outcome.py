"""Spec v1.3 "Runs with no handoff": a run that made none keeps its final status and verification itself;
issue 28 §7: an index of the unsettled handoffs for the overview's "In progress" tile.

Both columns are nullable with no default, so SQLite adds them with ALTER TABLE (no table rebuild, which the
overview's rollup triggers on receipts_run would not survive).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("receipts", "0030_silent_run_silence")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="final_status",
            field=models.CharField(blank=True, editable=False, max_length=20, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="verification",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        # Issue 28 §7: the overview's "In progress" tile counts the unsettled handoffs of its window.
        migrations.AddIndex(
            model_name="handoff",
            index=models.Index(
                condition=models.Q(("settled_at__isnull", True)), fields=["created_at"], name="handoff_unsettled"
            ),
        ),
    ]
