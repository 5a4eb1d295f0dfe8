"""The resolve_task permission (accept a false completion as it is, or mark it resolved), for operators and admins."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

# Frozen here: a migration must not follow later edits of receipts/roles.py.
RESOLVE_TASK_ROLES = ("operator", "admin")


def grant_resolve_task(apps, schema_editor):
    app_config = apps.get_app_config("receipts")
    app_config.models_module = True  # the migration state's stub lacks it
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None
    Permission = apps.get_model("auth", "Permission")
    permission = Permission.objects.get(content_type__app_label="receipts", codename="resolve_task")
    for group in apps.get_model("auth", "Group").objects.filter(name__in=RESOLVE_TASK_ROLES):
        group.permissions.add(permission)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0007_run_health_and_verdict_history"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="handoff",
            options={
                "ordering": ["-updated_at"],
                "permissions": [
                    ("view_dashboard", "Can view the health dashboard"),
                    ("decide_own_wait", "Can approve or reject waits they own"),
                    ("decide_any_wait", "Can approve or reject any wait"),
                    ("reopen_task", "Can reopen a false-complete task"),
                    ("control_run", "Can stop or resume auto-continue of a run"),
                    ("reassign_wait", "Can reassign or cancel a wait"),
                    ("change_limits", "Can change limits and contracts"),
                    ("start_run", "Can start a run of a registered graph"),
                    ("resolve_task", "Can accept or resolve a false-complete task"),
                ],
            },
        ),
        migrations.RunPython(grant_resolve_task, migrations.RunPython.noop),
    ]
