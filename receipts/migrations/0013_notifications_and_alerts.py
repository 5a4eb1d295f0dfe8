"""Notifications and alerts (issue 14 §1): channels, alert rules, deliveries; outbox intents that deliver.

An outbox intent may now deliver a message (kind `deliver`) and belong to no run (an alert on a worker
heartbeat). The admin role edits channels and rules and reads deliveries.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.db import migrations, models

# Frozen here: a migration must not follow later edits of receipts/roles.py.
ROLE_PERMISSIONS = {
    "admin": [
        "add_notificationchannel",
        "change_notificationchannel",
        "delete_notificationchannel",
        "view_notificationchannel",
        "add_alertrule",
        "change_alertrule",
        "delete_alertrule",
        "view_alertrule",
        "view_delivery",
    ]
}


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
        ("receipts", "0012_pages_at_scale"),
        ("auth", "0012_alter_user_first_name_max_length"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="outboxintent",
            name="kind",
            field=models.CharField(
                choices=[("start", "Start"), ("resume", "Resume"), ("reverify", "Reverify"), ("deliver", "Deliver")],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="outboxintent",
            name="run",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="intents",
                to="receipts.run",
            ),
        ),
        migrations.CreateModel(
            name="NotificationChannel",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=100, unique=True)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("email", "E-mail"),
                            ("webhook", "JSON webhook (HMAC-signed)"),
                            ("slack", "Slack incoming webhook"),
                        ],
                        max_length=10,
                    ),
                ),
                (
                    "email",
                    models.EmailField(
                        blank=True, help_text="E-mail only. Blank: the address of the person notified.", max_length=254
                    ),
                ),
                (
                    "url",
                    models.URLField(
                        blank=True, help_text="Webhook and Slack: where to POST (http or https).", max_length=500
                    ),
                ),
                (
                    "secret",
                    models.CharField(
                        blank=True,
                        help_text="Webhook only: the key the receiver checks the signature with.",
                        max_length=200,
                    ),
                ),
                ("active", models.BooleanField(default=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                (
                    "group",
                    models.ForeignKey(
                        blank=True,
                        help_text="Or: notify every member of this group of the waits they own.",
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notification_channels",
                        to="auth.group",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True,
                        help_text="Notify this user of the waits they own.",
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notification_channels",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        migrations.CreateModel(
            name="Delivery",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("event", models.CharField(max_length=40)),
                ("recipient", models.CharField(blank=True, max_length=150)),
                ("key", models.CharField(max_length=200, unique=True)),
                ("payload", models.JSONField()),
                (
                    "status",
                    models.CharField(
                        choices=[("queued", "Queued"), ("sent", "Sent"), ("failed", "Failed")],
                        db_index=True,
                        default="queued",
                        max_length=10,
                    ),
                ),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("last_error", models.CharField(blank=True, max_length=100)),
                ("created_at", models.DateTimeField(db_index=True, default=django.utils.timezone.now)),
                ("sent_at", models.DateTimeField(blank=True, null=True)),
                (
                    "channel",
                    models.ForeignKey(
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="deliveries",
                        to="receipts.notificationchannel",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "deliveries",
                "ordering": ["-created_at", "-pk"],
            },
        ),
        migrations.CreateModel(
            name="AlertRule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=100, unique=True)),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("verdict", "Verdict X on agent Y"),
                            ("window", "More than N non-healthy handoffs in M minutes"),
                            ("overdue", "A wait overdue"),
                            ("heartbeat", "Worker heartbeat lost"),
                        ],
                        max_length=10,
                    ),
                ),
                (
                    "verdict",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("HEALTHY", "HEALTHY"),
                            ("ROUTE_REJECTED", "ROUTE_REJECTED"),
                            ("STALE_CONTROL", "STALE_CONTROL"),
                            ("OPEN_TOOL_PROTOCOL", "OPEN_TOOL_PROTOCOL"),
                            ("CONTEXT_INCOMPLETE", "CONTEXT_INCOMPLETE"),
                            ("DESTINATION_NOT_STARTED", "DESTINATION_NOT_STARTED"),
                            ("WAITING_ON_APPROVAL", "WAITING_ON_APPROVAL"),
                            ("UNCERTAIN", "UNCERTAIN"),
                            ("FALSE_COMPLETE", "FALSE_COMPLETE"),
                        ],
                        help_text="Verdict rules: the verdict.",
                        max_length=40,
                    ),
                ),
                (
                    "agent",
                    models.CharField(
                        blank=True, help_text="Sender or receiver of the handoff; blank: any.", max_length=200
                    ),
                ),
                (
                    "threshold",
                    models.PositiveIntegerField(
                        default=0,
                        help_text="Fires when more than this many handoffs (or overdue waits) match; "
                        "heartbeat rules: when fewer than this many workers answer (at least one).",
                    ),
                ),
                (
                    "window_minutes",
                    models.PositiveIntegerField(
                        default=10,
                        help_text="Verdict and window rules: count handoffs whose verdict changed this recently.",
                    ),
                ),
                (
                    "cooldown_minutes",
                    models.PositiveIntegerField(
                        default=15,
                        help_text="At most one firing sent per this many minutes (a resolve is always sent).",
                    ),
                ),
                (
                    "muted_until",
                    models.DateTimeField(blank=True, help_text="Send nothing before this time.", null=True),
                ),
                ("active", models.BooleanField(default=True)),
                ("firing", models.BooleanField(default=False, editable=False)),
                ("announced", models.BooleanField(default=False, editable=False)),
                ("fired_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("notices", models.PositiveIntegerField(default=0, editable=False)),
                ("changed_at", models.DateTimeField(blank=True, editable=False, null=True)),
                (
                    "channel",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="alert_rules",
                        to="receipts.notificationchannel",
                    ),
                ),
            ],
            options={
                "ordering": ["name"],
            },
        ),
        migrations.AddConstraint(
            model_name="notificationchannel",
            constraint=models.CheckConstraint(
                condition=models.Q(("user__isnull", True), ("group__isnull", True), _connector="OR"),
                name="channel_of_user_or_group",
            ),
        ),
        migrations.RunPython(grant, revoke),
    ]
