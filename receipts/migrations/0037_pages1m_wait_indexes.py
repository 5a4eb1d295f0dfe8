"""Issue 32 §4 (pages at 1M receipts): the waits page's recently resolved waits of one owner ("mine") from an index
instead of a scan of every handoff, and the overview's waits opened in a window with the handoff in the wait
receipts' index, so the anti-join on the earlier waits reads the index alone."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0036_i30tools_tool_call_report"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="receipt",
            name="receipt_waits_by_time",
        ),
        migrations.AddIndex(
            model_name="handoff",
            index=models.Index(
                condition=models.Q(("wait_open", False), ("wait_part__isnull", False)),
                fields=["wait_owner", "-updated_at", "-id"],
                name="handoff_resolved_waits_owner",
            ),
        ),
        migrations.AddIndex(
            model_name="receipt",
            index=models.Index(
                condition=models.Q(("part", "wait")),
                fields=["recorded_at"],
                include=("handoff",),
                name="receipt_waits_by_time_handoff",
            ),
        ),
    ]
