"""Issue 22 §3: the retention policy (receipts.retention), one row edited in the admin with `change_retention`.

The admin role may view and change it (frozen here: a migration must not follow later edits of receipts/roles.py).
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.db import migrations, models

ROLE_PERMISSIONS = {"admin": ["change_retention", "view_retentionpolicy"]}


def grant(apps, schema_editor):
    app_config = apps.get_app_config("receipts")
    app_config.models_module = True  # the migration state's stub lacks it
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None
    Permission = apps.get_model("auth", "Permission")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=ROLE_PERMISSIONS):
        codenames = ROLE_PERMISSIONS[group.name]
        group.permissions.add(*Permission.objects.filter(content_type__app_label="receipts", codename__in=codenames))


def revoke(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=ROLE_PERMISSIONS):
        codenames = ROLE_PERMISSIONS[group.name]
        group.permissions.remove(*Permission.objects.filter(content_type__app_label="receipts", codename__in=codenames))


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0023_reserved"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]
    operations = [
        migrations.CreateModel(
            name="RetentionPolicy",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "receipts_days",
                    models.PositiveIntegerField(
                        default=90, help_text="Receipts and verdict history of ended runs, counted from the run's end."
                    ),
                ),
                (
                    "reports_days",
                    models.PositiveIntegerField(
                        default=90, help_text="Middleware reports of ended runs, counted from the run's end."
                    ),
                ),
                (
                    "deliveries_days",
                    models.PositiveIntegerField(
                        default=30,
                        help_text="Notification deliveries sent or given up, and worker task deliveries of ended runs.",
                    ),
                ),
                (
                    "runs_days",
                    models.PositiveIntegerField(
                        default=180, help_text="Ended runs with their handoffs and everything else recorded about them."
                    ),
                ),
                (
                    "audit_days",
                    models.PositiveIntegerField(default=400, help_text="Audit entries, counted from when they happened."),
                ),
                (
                    "audit_minimum_days",
                    models.PositiveIntegerField(
                        default=365, help_text="Audit entries are never kept for fewer days than this."
                    ),
                ),
                ("changed_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                (
                    "changed_by",
                    models.ForeignKey(
                        blank=True,
                        editable=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name": "retention policy",
                "verbose_name_plural": "retention policy",
                "permissions": [("change_retention", "Can change how long records are kept")],
                "default_permissions": ("view",),
                "constraints": [models.CheckConstraint(condition=models.Q(("pk", 1)), name="one_retention_policy")],
            },
        ),
        migrations.RunPython(grant, revoke),
    ]
