# issue 19 §1: the deployment id (one row, a random id made here, at the first migration), and intents that
# count as done only once a worker applied them (applied_at; the sweep's index follows the unapplied ones).
import secrets

import django.utils.timezone
from django.db import migrations, models


def make_deployment(apps, schema_editor):
    Deployment = apps.get_model("receipts", "Deployment")
    if not Deployment.objects.filter(pk=1).exists():
        Deployment.objects.create(pk=1, key=secrets.token_hex(16))


def count_sent_as_applied(apps, schema_editor):
    # Intents sent before this change were applied the old way (sent meant done): not sent again now.
    OutboxIntent = apps.get_model("receipts", "OutboxIntent")
    OutboxIntent.objects.filter(sent_at__isnull=False).update(applied_at=models.F("sent_at"))


class Migration(migrations.Migration):
    dependencies = [("receipts", "0017_contract_steps")]

    operations = [
        migrations.CreateModel(
            name="Deployment",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("key", models.CharField(editable=False, max_length=32, unique=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
            ],
            options={
                "constraints": [models.CheckConstraint(condition=models.Q(("pk", 1)), name="one_deployment")],
            },
        ),
        migrations.RunPython(make_deployment, migrations.RunPython.noop),
        migrations.AddField(
            model_name="outboxintent",
            name="applied_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(count_sent_as_applied, migrations.RunPython.noop),
        migrations.RemoveIndex(model_name="outboxintent", name="outbox_unsent_by_due"),
        migrations.AddIndex(
            model_name="outboxintent",
            index=models.Index(
                condition=models.Q(("applied_at__isnull", True)), fields=["due_at"], name="outbox_unapplied_by_due"
            ),
        ),
        migrations.AlterField(
            model_name="alertrule",
            name="kind",
            field=models.CharField(
                choices=[
                    ("verdict", "Verdict X on agent Y"),
                    ("window", "More than N non-healthy handoffs in M minutes"),
                    ("overdue", "A wait overdue"),
                    ("heartbeat", "Worker heartbeat lost"),
                    ("unapplied", "Work no worker applied in time"),
                ],
                max_length=10,
            ),
        ),
    ]
