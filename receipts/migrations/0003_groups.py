"""The four roles as groups. Default deny: a user in no group can do nothing."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

ROLES = {
    "viewer": ["view_dashboard"],
    "operator": ["view_dashboard", "reopen_task", "control_run", "reassign_wait"],
    "approver": ["view_dashboard", "decide_own_wait"],
    "admin": [
        "view_dashboard",
        "decide_own_wait",
        "decide_any_wait",
        "reopen_task",
        "control_run",
        "reassign_wait",
        "change_limits",
    ],
}


def create_groups(apps, schema_editor):
    # Permissions are normally created after all migrations; the groups need them now.
    app_config = apps.get_app_config("receipts")
    app_config.models_module = True  # the migration state's stub lacks it
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set(Permission.objects.filter(content_type__app_label="receipts", codename__in=codenames))


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLES).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0002_permissions_and_audit"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
