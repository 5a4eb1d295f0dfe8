"""A `tool_call` middleware report (issue 30 §1): how long each tool call that is no transfer took, by name only."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0035_i30admin_alert_rule_verdicts"),
    ]

    operations = [
        migrations.AlterField(
            model_name="middlewarereport",
            name="kind",
            field=models.CharField(
                choices=[
                    ("retry_exhausted", "Retry Exhausted"),
                    ("tool_error", "Tool Error"),
                    ("call_limit", "Call Limit"),
                    ("summarized", "Summarized"),
                    ("context_edited", "Context Edited"),
                    ("model_failed", "Model Failed"),
                    ("evidence_dropped", "Evidence Dropped"),
                    ("no_handoff", "No Handoff"),
                    ("unobserved_stream", "Unobserved Stream"),
                    ("unseen_without_middleware", "Unseen Without Middleware"),
                    ("no_verifier", "No Verifier"),
                    ("graph_error", "Graph Error"),
                    ("value_redacted", "Value Redacted"),
                    ("tool_call", "Tool Call"),
                ],
                max_length=40,
            ),
        ),
    ]
