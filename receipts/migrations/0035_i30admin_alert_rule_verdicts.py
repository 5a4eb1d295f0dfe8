"""A window rule counts only the verdicts chosen for it (issue 30 §5), and the default "A handoff settled
failing" rule (0034) counts the failing verdicts only: an uncertain or waiting handoff does not fire it.

Frozen here: the failing verdicts as they were written (receipts.notify.alerts.FAILING reads them from the
assessment); a default rule an admin already gave verdicts keeps them.
"""

from django.db import migrations, models

DEFAULT_RULE = "A handoff settled failing"
FAILING = [
    "ROUTE_REJECTED",
    "STALE_CONTROL",
    "OPEN_TOOL_PROTOCOL",
    "CONTEXT_INCOMPLETE",
    "DESTINATION_NOT_STARTED",
    "FALSE_COMPLETE",
]


def count_failing_only(apps, schema_editor):
    AlertRule = apps.get_model("receipts", "AlertRule")
    for rule in AlertRule.objects.filter(name=DEFAULT_RULE, kind="window"):
        if not rule.verdicts:
            rule.verdicts = FAILING
            rule.save(update_fields=["verdicts"])


class Migration(migrations.Migration):
    dependencies = [("receipts", "0034_default_alert_rules")]

    operations = [
        migrations.AddField(
            model_name="alertrule",
            name="verdicts",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text=(
                    "Window rules: count only handoffs settled in these verdicts; none chosen: every non-healthy one."
                ),
            ),
        ),
        migrations.RunPython(count_failing_only, migrations.RunPython.noop),
    ]
