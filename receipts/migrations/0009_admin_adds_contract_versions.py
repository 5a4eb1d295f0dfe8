"""The admin role adds contract versions and wait reasons in the Django admin (it could not even open them).

Versions are kept, never edited in place (spec §2): the role gets add and view,
never change; the admin itself refuses to delete a version handoffs reference.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

# Frozen here: a migration must not follow later edits of receipts/roles.py.
ROLE_PERMISSIONS = {"admin": ["add_contractversion", "view_contractversion", "add_waitreason", "view_waitreason"]}


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
        ("receipts", "0008_resolve_task"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
