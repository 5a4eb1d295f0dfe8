"""The demo team's own limits: what it adds to the runtime defaults for its agents, and no other graph's.

Registered with the demo graph (`GraphDescription.limits`, agents/demo/graph.py):
its tools' retry retries the demo's flaky dependency, and its sensitive tools
wait for an approval. An admin's limits document changes them like any other
setting (default or per agent).
"""

from __future__ import annotations

from typing import Any

from agents.limits import DECISIONS

DEMO_LIMITS: dict[str, Any] = {
    "tool_retry": {"retry_on": ["TransientServiceError"]},
    "approval": {
        "tools": {
            "place_order": {"allowed_decisions": list(DECISIONS), "reason": "purchase_approval", "threshold": 500},
            "disclose_secret": {"allowed_decisions": list(DECISIONS), "reason": "secret_disclosure"},
            "refund": {"allowed_decisions": list(DECISIONS), "reason": "irreversible_choice"},
        }
    },
}
# The coder works in a per-run workspace (shell, file search); support keeps a to-do list.
WORKSPACE_AGENTS = frozenset({"coder"})
TODO_AGENTS = frozenset({"support"})
