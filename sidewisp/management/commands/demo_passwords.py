"""Set and print new random passwords for the demo accounts (issue 30 §6).

`make run` prints each demo password once, when the account is created; afterwards only this command
shows one again (a password is stored hashed, so it cannot be printed, only replaced). Missing demo
accounts are created first (ensure_demo_user). Each reset is a system entry in the audit log (the
password itself is never recorded).
"""

from __future__ import annotations

import io
import secrets

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from receipts.org import audit
from sidewisp.management.commands.ensure_demo_user import DEMO_ACCOUNTS


class Command(BaseCommand):
    help = "Set new random passwords for the demo accounts (operator, ops-lead, viewer, admin) and print them."

    def handle(self, *args, **options):
        call_command("ensure_demo_user", stdout=io.StringIO())
        users = get_user_model().objects
        for username, (roles, _staff) in DEMO_ACCOUNTS.items():
            password = secrets.token_urlsafe(12)
            with transaction.atomic():
                user = users.select_for_update().get(username=username)
                user.set_password(password)
                user.save(update_fields=["password"])
                audit.log(
                    actor=None,
                    action="demo.password_reset",
                    object_type="user",
                    object_id=user.pk,
                    outcome="done",
                    reason=f"demo_passwords set a new password for {username}",
                )
            self.stdout.write(f"demo account: login {username} / password {password} ({', '.join(roles)})")
