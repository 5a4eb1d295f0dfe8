# Issue 21 §1: the worker deliveries of a run's tasks (receipts.TaskDelivery), shown in the run's history.
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("receipts", "0018_deployment_and_applied_intents")]

    operations = [
        migrations.CreateModel(
            name="TaskDelivery",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("task", models.CharField(max_length=16)),
                ("task_id", models.CharField(blank=True, max_length=200)),
                ("worker", models.CharField(blank=True, max_length=200)),
                ("attempt", models.PositiveIntegerField(default=1)),
                ("redelivered", models.BooleanField(default=False)),
                ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("ended_at", models.DateTimeField(blank=True, null=True)),
                ("outcome", models.CharField(blank=True, max_length=40)),
                ("verdict", models.CharField(blank=True, max_length=40)),
                (
                    "promised_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="deliveries",
                        to="receipts.auditentry",
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="task_deliveries", to="receipts.run"
                    ),
                ),
            ],
            options={"indexes": [models.Index(fields=["run", "started_at"], name="delivery_run_started")]},
        ),
    ]
