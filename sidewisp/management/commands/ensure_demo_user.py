"""Create the demo accounts once, printing each random password once.

- `operator`: groups operator + approver (not a superuser);
- `ops-lead`: approver, the owner of the demo approval waits;
- `viewer`: viewer only;
- `admin`: admin group and staff, for the Django admin.

Opt-in (README: Notifications and alerts): with SIDEWISP_DEMO_WEBHOOK_URL set, `ops-lead` also gets a
signed webhook channel to that URL (the secret from SIDEWISP_DEMO_WEBHOOK_SECRET, or a random one printed
once) and an alert rule fires on it for every FALSE_COMPLETE.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from receipts.models import AlertRule, NotificationChannel
from receipts.org.roles import ensure_groups

DEMO_USERNAME = "operator"
DEMO_CHANNEL = "ops-lead webhook (demo)"
DEMO_ACCOUNTS: dict[str, tuple[tuple[str, ...], bool]] = {
    # username: (groups, is_staff)
    "operator": (("operator", "approver"), False),
    "ops-lead": (("approver",), False),
    "viewer": (("viewer",), False),
    "admin": (("admin",), True),
}


class Command(BaseCommand):
    help = "Create the demo accounts (operator, ops-lead, viewer, admin) if they do not exist."

    def handle(self, *args, **options):
        groups = ensure_groups()
        users = get_user_model().objects
        for username, (roles, staff) in DEMO_ACCOUNTS.items():
            user = users.filter(username=username).first()
            if user is not None:
                # An older checkout made `operator` a superuser: demo accounts get their roles, nothing more.
                user.groups.add(*(groups[role] for role in roles))
                if user.is_superuser and not staff:
                    user.is_superuser = False
                    user.save(update_fields=["is_superuser"])
                self.stdout.write(f"demo account: {username} (exists; password printed when it was created)")
                continue
            password = secrets.token_urlsafe(12)
            user = users.create_user(username, password=password)
            user.is_staff = staff
            user.save(update_fields=["is_staff"])
            user.groups.set([groups[role] for role in roles])
            self.stdout.write(f"demo account created: login {username} / password {password} ({', '.join(roles)})")
        if settings.SIDEWISP_DEMO_WEBHOOK_URL:
            self._demo_webhook(users.get(username="ops-lead"))

    def _demo_webhook(self, owner) -> None:
        if NotificationChannel.objects.filter(name=DEMO_CHANNEL).exists():
            self.stdout.write(f"demo webhook: {DEMO_CHANNEL} (exists)")
            return
        secret = settings.SIDEWISP_DEMO_WEBHOOK_SECRET or secrets.token_urlsafe(24)
        channel = NotificationChannel.objects.create(
            name=DEMO_CHANNEL,
            kind=NotificationChannel.Kind.WEBHOOK,
            user=owner,
            url=settings.SIDEWISP_DEMO_WEBHOOK_URL,
            secret=secret,
        )
        AlertRule.objects.get_or_create(
            name="False completions",
            defaults={"kind": AlertRule.Kind.VERDICT, "verdict": "FALSE_COMPLETE", "channel": channel},
        )
        shown = "SIDEWISP_DEMO_WEBHOOK_SECRET" if settings.SIDEWISP_DEMO_WEBHOOK_SECRET else f"secret {secret}"
        self.stdout.write(f"demo webhook created: ops-lead's waits and FALSE_COMPLETE alerts, signed with {shown}")
