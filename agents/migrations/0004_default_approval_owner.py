"""The default approval owner, "ops-lead", as a group, so the built-in limits name an owner that exists;
and the settings of existing `AgentLimits` rows carried into limits version 1 (runs now read versions).
"""

from django.db import migrations

OWNER = "ops-lead"
# The approval gates as they were when AgentLimits held the settings.
GATES = {
    "place_order": {"allowed_decisions": ["approve", "edit", "reject"], "reason": "purchase_approval"},
    "disclose_secret": {"allowed_decisions": ["approve", "edit", "reject"], "reason": "secret_disclosure"},
    "refund": {"allowed_decisions": ["approve", "edit", "reject"], "reason": "irreversible_choice"},
}


def create_owner(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name=OWNER)


def carry_agent_limits(apps, schema_editor):
    AgentLimits = apps.get_model("agents", "AgentLimits")
    LimitsVersion = apps.get_model("agents", "LimitsVersion")
    rows = list(AgentLimits.objects.all())
    if not rows or LimitsVersion.objects.exists():
        return
    # The built-in defaults of the code this migration ships with; the rows' own values are laid over them.
    from agents.limits import DEFAULT_DOCUMENT

    agents = {row.agent: _override(row) for row in rows}
    LimitsVersion.objects.create(
        number=1, document={**DEFAULT_DOCUMENT, "agents": agents}, note="carried over from agent limits"
    )


def _override(row) -> dict:
    gates = {name: {**rule, "reason": row.approval_reason or rule["reason"]} for name, rule in GATES.items()}
    gates["place_order"]["threshold"] = row.approval_threshold
    delays = {"initial_delay": row.retry_initial_delay, "max_delay": row.retry_max_delay}
    return {
        "tool_call_limit": {"run_limit": row.tool_run_limit, "thread_limit": row.tool_thread_limit},
        "per_tool_limits": {name: {"run_limit": int(n)} for name, n in (row.per_tool_run_limits or {}).items()},
        "model_call_limit": {"run_limit": row.model_run_limit, "thread_limit": row.model_thread_limit},
        "tool_retry": {"max_retries": row.tool_max_retries, **delays},
        "model_retry": {"max_retries": row.model_max_retries, **delays},
        "summarization": {
            "trigger": [{"messages": row.summarize_after_messages}],
            "keep": ["messages", row.summarize_keep_messages],
        },
        "context_editing": {"trigger": row.context_edit_trigger_tokens, "keep": row.context_edit_keep},
        "approval": {
            "tools": gates,
            "owner": row.approval_owner,
            "deadline_minutes": row.approval_deadline_minutes,
        },
    }


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0003_limits_versions"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.RunPython(create_owner, migrations.RunPython.noop),
        migrations.RunPython(carry_agent_limits, migrations.RunPython.noop),
    ]
