"""Create the demo operator account once, printing its random password once."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

DEMO_USERNAME = "operator"


class Command(BaseCommand):
    help = "Create a demo operator account if none exists."

    def handle(self, *args, **options):
        users = get_user_model().objects
        if users.filter(username=DEMO_USERNAME).exists():
            self.stdout.write(f"demo account: {DEMO_USERNAME} (exists; password printed when it was created)")
            return
        password = secrets.token_urlsafe(12)
        user = users.create_user(DEMO_USERNAME, password=password)
        user.is_staff = True
        user.is_superuser = True
        user.save(update_fields=["is_staff", "is_superuser"])
        self.stdout.write(f"demo account created: login {DEMO_USERNAME} / password {password}")
