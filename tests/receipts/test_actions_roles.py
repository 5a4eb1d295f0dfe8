"""The role groups: receipts.roles mirrors the data migration, and the demo accounts get exactly their roles."""

from __future__ import annotations

import importlib
import io

from django.contrib.auth import get_user_model
from django.core.management import call_command

from receipts.roles import ROLES, ensure_groups


def test_the_roles_module_matches_the_migrations_that_create_the_groups():
    groups = importlib.import_module("receipts.migrations.0003_groups")
    start_run = importlib.import_module("receipts.migrations.0005_hosted_and_observed_runs")

    migrated = {role: [*codenames] for role, codenames in groups.ROLES.items()}
    for role in start_run.START_RUN_ROLES:
        migrated[role].append("start_run")
    assert ROLES == migrated


def test_ensure_groups_gives_each_role_its_permissions(db):
    groups = ensure_groups()

    granted = {name: sorted(g.permissions.values_list("codename", flat=True)) for name, g in groups.items()}
    assert granted == {name: sorted(codenames) for name, codenames in ROLES.items()}


def test_the_demo_accounts_get_their_roles_and_no_superuser(db):
    out = io.StringIO()

    call_command("ensure_demo_user", stdout=out)

    users = {u.username: u for u in get_user_model().objects.all()}
    groups = {name: sorted(u.groups.values_list("name", flat=True)) for name, u in users.items()}
    assert groups == {
        "operator": ["approver", "operator"],
        "ops-lead": ["approver"],
        "viewer": ["viewer"],
        "admin": ["admin"],
    }
    assert not any(u.is_superuser for u in users.values())
    assert [name for name, u in users.items() if u.is_staff] == ["admin"]
    assert out.getvalue().count("password") == 4


def test_the_demo_passwords_are_printed_only_once(db):
    call_command("ensure_demo_user", stdout=io.StringIO())
    again = io.StringIO()

    call_command("ensure_demo_user", stdout=again)

    assert "password " not in again.getvalue().replace("password printed", "")
