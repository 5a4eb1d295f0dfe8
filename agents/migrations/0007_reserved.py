"""The demo's limits leave the stored defaults (issue 18): no graph's names in what every graph gets.

Until now the built-in defaults retried the demo's `TransientServiceError` and
gated the demo's `place_order`, `disclose_secret` and `refund` for every agent
of every graph, and `LimitsVersion.current()` stored them as version 1. The demo
now registers them as its own graph's limits (agents/demo/limits.py). The newest
stored version loses every such setting still at its old built-in value, as a
new version (versions are never edited); a value an admin changed stays. A
database with no version, or none holding them, gets nothing.
"""

from django.db import migrations

_DECISIONS = ["approve", "edit", "reject"]
# The built-in values this change moved to the demo graph, as version 1 stored them.
OLD_BUILT_INS = {
    "tool_retry": {"retry_on": ["TransientServiceError"]},
    "approval": {
        "tools": {
            "place_order": {"allowed_decisions": _DECISIONS, "reason": "purchase_approval", "threshold": 500},
            "disclose_secret": {"allowed_decisions": _DECISIONS, "reason": "secret_disclosure"},
            "refund": {"allowed_decisions": _DECISIONS, "reason": "irreversible_choice"},
        }
    },
}
NOTE = "the demo's retried error and approval gates moved to the demo graph's own limits"


def _without_old(settings, old):
    """`settings` without the leaves equal to `old`'s; objects emptied that way vanish."""
    kept = {}
    for key, value in settings.items():
        if key not in old:
            kept[key] = value
        elif isinstance(value, dict) and isinstance(old[key], dict):
            inner = _without_old(value, old[key])
            if inner or not value:
                kept[key] = inner
        elif value != old[key]:
            kept[key] = value
    return kept


def _moved(document):
    default = document.get("default") or {}
    agents = document.get("agents") or {}
    if not isinstance(default, dict) or not isinstance(agents, dict):
        return document
    return {
        **document,
        "default": _without_old(default, OLD_BUILT_INS),
        "agents": {
            agent: _without_old(override, OLD_BUILT_INS) if isinstance(override, dict) else override
            for agent, override in agents.items()
        },
    }


def move_demo_limits(apps, schema_editor):
    LimitsVersion = apps.get_model("agents", "LimitsVersion")
    newest = LimitsVersion.objects.order_by("-number").first()
    if newest is None or not isinstance(newest.document, dict):
        return
    document = _moved(newest.document)
    if document != newest.document:
        LimitsVersion.objects.create(number=newest.number + 1, document=document, note=NOTE)


class Migration(migrations.Migration):
    dependencies = [("agents", "0006_checkpoint_tables")]

    operations = [migrations.RunPython(move_demo_limits, migrations.RunPython.noop)]
