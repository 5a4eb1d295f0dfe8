"""Issue 14 §4: per-source API tokens (receipts.workers.sources) and the source that created a run.

The admin role makes and revokes tokens in the admin (add, change = the revoke action, view; never delete).
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.db import migrations, models

# Frozen here: a migration must not follow later edits of receipts/roles.py.
ROLE_PERMISSIONS = {"admin": ["add_sourcetoken", "change_sourcetoken", "view_sourcetoken"]}


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
    dependencies = [("receipts", "0013_notifications_and_alerts")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="source_name",
            field=models.CharField(blank=True, db_index=True, default="", editable=False, max_length=100),
        ),
        migrations.CreateModel(
            name="SourceToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("source_name", models.CharField(db_index=True, max_length=100)),
                ("note", models.CharField(blank=True, max_length=200)),
                ("key_id", models.CharField(editable=False, max_length=16, unique=True)),
                ("digest", models.CharField(editable=False, max_length=64)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ("last_used_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        editable=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "revoked_by",
                    models.ForeignKey(
                        blank=True,
                        editable=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["source_name", "-created_at"]},
        ),
        migrations.RunPython(grant, revoke),
    ]
