"""The four roles as groups (the same as migration 0003_groups), for fixtures and commands.

Default deny: a user in no group has no permission and sees nothing.
"""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

ROLES: dict[str, list[str]] = {
    "viewer": ["view_dashboard"],
    "operator": ["view_dashboard", "reopen_task", "resolve_task", "control_run", "reassign_wait", "start_run"],
    "approver": ["view_dashboard", "decide_own_wait"],
    "admin": [
        "view_dashboard",
        "decide_own_wait",
        "decide_any_wait",
        "reopen_task",
        "resolve_task",
        "control_run",
        "reassign_wait",
        "change_limits",
        "start_run",
        # Contracts are versions: the admin adds them, never changes one (migration 0009).
        "add_contractversion",
        "view_contractversion",
        "add_waitreason",
        "view_waitreason",
        # Notifications and alerts (issue 14 §1, migration 0013): channels and rules edited, deliveries read.
        "add_notificationchannel",
        "change_notificationchannel",
        "delete_notificationchannel",
        "view_notificationchannel",
        "add_alertrule",
        "change_alertrule",
        "delete_alertrule",
        "view_alertrule",
        "view_delivery",
        # Source tokens of agents that run elsewhere (issue 14 §4, migration 0014): made and revoked, never edited.
        "add_sourcetoken",
        "change_sourcetoken",
        "view_sourcetoken",
        # Retention (issue 22 §3, migration 0024): the one policy row, viewed and changed.
        "change_retention",
        "view_retentionpolicy",
        # Teams (issue 22 §2, migration 0023): admins see every team's runs and edit the teams.
        "view_all_teams",
        # Single sign-on (issue 22 §1, migration 0026): which accounts follow the identity provider, read-only.
        "view_ssoidentity",
        "add_team",
        "change_team",
        "delete_team",
        "view_team",
    ],
}


def ensure_groups() -> dict[str, Group]:
    """Create the role groups (or reset their permissions to ROLES); returns them by name."""
    groups = {}
    for role, codenames in ROLES.items():
        group, _ = Group.objects.get_or_create(name=role)
        permissions = Permission.objects.filter(content_type__app_label="receipts", codename__in=codenames)
        if permissions.count() != len(codenames):
            msg = f"the permissions of role {role!r} are not all installed (run migrate)"
            raise LookupError(msg)
        group.permissions.set(permissions)
        groups[role] = group
    return groups
