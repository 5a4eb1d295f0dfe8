# The contracts' steps entry (issue 18, spec v1.2 Steps of one agent): a version may name its step variable.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("receipts", "0016_settled_verdicts")]

    operations = [
        migrations.AddField(
            model_name="contractversion",
            name="steps",
            field=models.JSONField(
                blank=True, help_text='{"key": "current_step", "tools": {"step": ["tool", "names"]}}', null=True
            ),
        ),
    ]
