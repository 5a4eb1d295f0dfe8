"""An app with no Django that reports to a Sidewisp server through the agent package (issue 31 §2).

Run by tests/agents/test_agent_package.py with the virtualenv's own Python, outside the repository, so nothing of
the server can be imported. Configured by SIDEWISP_URL and SIDEWISP_TOKEN; argv[1] is a JSON file of entries (the
evidence of a handoff that waits for approval). Prints one JSON line per step: `configured` (or the
`ConfigurationError`), `delivered` once the writer flushed, then `claimed` with the decision an approver made on
the dashboard, taken back as `await_decision` takes it.
"""

from __future__ import annotations

import json
import sys
import time

import sidewisp_agent
from sidewisp_agent import entries, store, writer


def say(**what: object) -> None:
    print(json.dumps(what), flush=True)


def main() -> int:
    try:
        sidewisp_agent.configure()
    except sidewisp_agent.ConfigurationError as exc:
        say(step="refused", error=str(exc))
        return 2
    say(step="configured", django="django" in sys.modules)
    with open(sys.argv[1]) as handle:
        found = json.load(handle)
    parts = [entries.PartEntry(**{k: v for k, v in obj.items() if k != "kind"}) for obj in found]
    writer.submit_all(parts)
    say(step="delivered", flushed=writer.flush(60), stats=dict(writer.stats()))
    operation_id = parts[0].operation_id
    server = store.current()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        offered = server.pending_decision(operation_id)
        if offered is not None:
            claimed = server.claim_decision(operation_id, offered["id"])
            say(step="claimed", type=claimed["type"], resume=claimed["resume"])
            return 0
        time.sleep(0.1)
    say(step="no decision")
    return 1


if __name__ == "__main__":
    sys.exit(main())
