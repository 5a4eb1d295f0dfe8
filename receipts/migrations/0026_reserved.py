"""Issue 22 §1 (single sign-on): SsoIdentity, the identity provider's (issuer, subject) behind a user.

A user with one is managed by the identity provider; a user without one is a local account. The admin role
may read the list (Django admin, read-only).
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.db import migrations, models


# role → the permissions this migration grants it (tests/receipts/test_actions_roles.py reads it).
ROLE_PERMISSIONS = {"admin": ["view_ssoidentity"]}


def let_admins_read_identities(apps, schema_editor):
    # Permissions are normally created after all migrations; the admin group needs the new one now.
    app_config = apps.get_app_config("receipts")
    app_config.models_module = True  # the migration state's stub lacks it
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None
    permissions = apps.get_model("auth", "Permission").objects.filter(content_type__app_label="receipts")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=ROLE_PERMISSIONS):
        group.permissions.add(*permissions.filter(codename__in=ROLE_PERMISSIONS[group.name]))


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0025_reserved"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="SsoIdentity",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("issuer", models.CharField(max_length=500)),
                (
                    "subject",
                    models.CharField(help_text="The identity provider's `sub` claim: stable, never reused.", max_length=255),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="sso_identity",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "verbose_name": "single sign-on identity",
                "verbose_name_plural": "single sign-on identities",
                "constraints": [models.UniqueConstraint(fields=("issuer", "subject"), name="sso_identity_once")],
            },
        ),
        migrations.RunPython(let_admins_read_identities, migrations.RunPython.noop),
    ]
