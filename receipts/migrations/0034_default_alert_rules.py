"""Default alert rules (issue 30 §5): a handoff settled failing, work not applied past its bound, a wait past
its deadline; each an ordinary rule an admin edits, told to the admin group by e-mail.

Frozen here: a migration must not follow later edits of the models. Nothing is added twice, and a name an
admin already used is left alone.
"""

from django.db import migrations

CHANNEL = "Admins by e-mail"
RULES = [
    {
        "name": "A handoff settled failing",
        "kind": "window",
        "threshold": 0,
        "window_minutes": 10,
    },
    {
        "name": "Work not applied past its bound",
        "kind": "unapplied",
        "threshold": 0,
        "window_minutes": 10,
    },
    {
        "name": "A wait past its deadline",
        "kind": "overdue",
        "threshold": 0,
        "window_minutes": 10,
    },
]


def add_defaults(apps, schema_editor):
    Channel = apps.get_model("receipts", "NotificationChannel")
    AlertRule = apps.get_model("receipts", "AlertRule")
    admins = apps.get_model("auth", "Group").objects.filter(name="admin").first()
    channel = Channel.objects.filter(name=CHANNEL).first()
    if channel is None:
        channel = Channel.objects.create(name=CHANNEL, kind="email", group=admins, active=True)
    for rule in RULES:
        if not AlertRule.objects.filter(name=rule["name"]).exists():
            AlertRule.objects.create(channel=channel, cooldown_minutes=15, active=True, **rule)


def remove_defaults(apps, schema_editor):
    AlertRule = apps.get_model("receipts", "AlertRule")
    AlertRule.objects.filter(name__in=[rule["name"] for rule in RULES], firing=False).delete()
    Channel = apps.get_model("receipts", "NotificationChannel")
    Channel.objects.filter(name=CHANNEL, alert_rules__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [("receipts", "0033_reopen_decision_kind"), ("auth", "0012_alter_user_first_name_max_length")]

    operations = [migrations.RunPython(add_defaults, remove_defaults)]
