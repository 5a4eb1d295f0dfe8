"""The role groups: receipts.org.roles mirrors the data migration, and the demo accounts get exactly their roles."""

from __future__ import annotations

import importlib
import io
import pkgutil

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command

from receipts import migrations
from receipts.org.roles import ROLES, ensure_groups


def _migrated_roles() -> dict[str, list[str]]:
    """The roles as the receipts migrations leave them, each migration's grants frozen in it.

    0003 creates the groups (`ROLES`); a later one grants one permission to some roles
    (`START_RUN_ROLES` grants start_run) or several (`ROLE_PERMISSIONS`, role → codenames).
    """
    roles: dict[str, list[str]] = {}
    for name in sorted(m.name for m in pkgutil.iter_modules(migrations.__path__)):
        module = importlib.import_module(f"receipts.migrations.{name}")
        for role, codenames in getattr(module, "ROLES", {}).items():
            roles[role] = [*codenames]
        for attr, value in vars(module).items():
            if attr.endswith("_ROLES") and attr != "ROLES":
                for role in value:
                    roles[role].append(attr.removesuffix("_ROLES").lower())
        for role, codenames in getattr(module, "ROLE_PERMISSIONS", {}).items():
            roles[role].extend(codenames)
    return roles


def test_the_roles_module_matches_the_migrations_that_create_the_groups():
    assert {role: sorted(codenames) for role, codenames in ROLES.items()} == {
        role: sorted(codenames) for role, codenames in _migrated_roles().items()
    }


def test_the_migrated_admin_group_may_add_contract_versions_but_not_change_them(db):
    granted = set(Group.objects.get(name="admin").permissions.values_list("codename", flat=True))

    assert {"add_contractversion", "view_contractversion", "add_waitreason", "view_waitreason"} <= granted
    assert not granted & {"change_contractversion", "delete_contractversion"}


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
