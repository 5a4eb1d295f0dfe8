"""Teams (issue 22 §2): Team, Membership, TeamGraph, TeamSource, per-team alert rules, `view_all_teams`.

Also makes the one default team ("default", `owns_unclaimed`): it owns every graph and source no team
claims and counts every user in no team as a member, so `make run` shows the demo runs to the demo
accounts with no configuration. The admin role gets `view_all_teams` (it sees every team's runs) and edits the teams.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.db import migrations, models


# The admin role sees every team's runs and edits the teams (receipts.org.roles.ROLES says the same).
ROLE_PERMISSIONS = {"admin": ["view_all_teams", "add_team", "change_team", "delete_team", "view_team"]}


def make_default_team(apps, schema_editor):
    apps.get_model("receipts", "Team").objects.get_or_create(
        slug="default", defaults={"name": "Default", "owns_unclaimed": True}
    )
    # Permissions are normally created after all migrations; the admin group needs the new one now.
    app_config = apps.get_app_config("receipts")
    app_config.models_module = True  # the migration state's stub lacks it
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None
    Permission = apps.get_model("auth", "Permission")
    for role, codenames in ROLE_PERMISSIONS.items():
        granted = Permission.objects.filter(content_type__app_label="receipts", codename__in=codenames)
        for group in apps.get_model("auth", "Group").objects.filter(name=role):
            group.permissions.add(*granted)


class Migration(migrations.Migration):
    dependencies = [
        ("receipts", "0022_reserved"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
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
                    ("view_all_teams", "Can see and act on the runs of every team"),
                ],
            },
        ),
        migrations.CreateModel(
            name="Membership",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "origin",
                    models.CharField(
                        choices=[("local", "Set locally"), ("claim", "From the identity provider's claim")],
                        default="local",
                        max_length=10,
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="team_memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
        migrations.CreateModel(
            name="Team",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "slug",
                    models.SlugField(help_text="The name identity-provider claims use.", max_length=100, unique=True),
                ),
                ("name", models.CharField(max_length=200)),
                (
                    "owns_unclaimed",
                    models.BooleanField(
                        default=False,
                        help_text="The default team: owns the graphs and sources no team claims; users in no team belong to it.",
                    ),
                ),
                (
                    "members",
                    models.ManyToManyField(
                        blank=True,
                        related_name="sidewisp_teams",
                        through="receipts.Membership",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["slug"],
            },
        ),
        migrations.AddField(
            model_name="membership",
            name="team",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to="receipts.team"
            ),
        ),
        migrations.AddField(
            model_name="alertrule",
            name="team",
            field=models.ForeignKey(
                blank=True,
                help_text="Count only this team's runs; blank: every team's.",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="alert_rules",
                to="receipts.team",
            ),
        ),
        migrations.CreateModel(
            name="TeamGraph",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("graph", models.CharField(help_text="A graph has one owner.", max_length=100, unique=True)),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="graphs", to="receipts.team"
                    ),
                ),
            ],
            options={
                "ordering": ["graph"],
            },
        ),
        migrations.CreateModel(
            name="TeamSource",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("source_name", models.CharField(help_text="A source has one owner.", max_length=100, unique=True)),
                (
                    "team",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="sources", to="receipts.team"
                    ),
                ),
            ],
            options={
                "ordering": ["source_name"],
            },
        ),
        migrations.AddConstraint(
            model_name="team",
            constraint=models.UniqueConstraint(
                condition=models.Q(("owns_unclaimed", True)), fields=("owns_unclaimed",), name="one_default_team"
            ),
        ),
        migrations.AddConstraint(
            model_name="membership",
            constraint=models.UniqueConstraint(fields=("user", "team"), name="one_membership_per_team"),
        ),
        migrations.RunPython(make_default_team, migrations.RunPython.noop),
    ]
