"""Words and icons for verdicts and boundary states: never colour alone."""

from __future__ import annotations

from receipts.verdicts.words import VERDICT_WORDS, alert_choices

# verdict -> (icon, label, tone); the tone picks a colour, the icon and label carry the meaning. The words are
# receipts.verdicts.words' (notifications, alert rules and CSV say the same): this is the one place pages read.
_VERDICT_LOOKS: dict[str, tuple[str, str]] = {
    "HEALTHY": ("✔", "ok"),
    "WAITING_ON_APPROVAL": ("◔", "wait"),
    "UNCERTAIN": ("?", "warn"),
}
VERDICTS: dict[str, tuple[str, str, str]] = {
    code: (icon, words, tone)
    for code, words in VERDICT_WORDS.items()
    for icon, tone in [_VERDICT_LOOKS.get(code, ("✖", "bad"))]
}
ALERT_VERDICT_CHOICES = alert_choices  # the alert-rule form's verdicts: by name, HEALTHY not offered


def verdict_words(code: str) -> str:
    """A verdict's words, as every page, alert, CSV and notification says it."""
    return VERDICTS.get(code, UNKNOWN)[1] if code else UNKNOWN[1]


BOUNDARIES: dict[str, str] = {
    "route": "Route",
    "control": "Control",
    "tool_protocol": "Tool protocol",
    "context": "Context",
    "destination": "Destination",
    "wait": "Wait",
    "outcome": "Outcome",
}

# boundary state -> (icon, label)
STATES: dict[str, tuple[str, str]] = {
    "pass": ("✔", "pass"),
    "fail": ("✖", "fail"),
    "waiting": ("◔", "waiting"),
    "not_reached": ("—", "not reached"),
    "not_applicable": ("○", "not applicable"),
}

UNKNOWN = ("•", "unknown", "muted")

# Who drives a run (receipts.models.Run.Mode).
MODES: dict[str, str] = {"hosted": "Hosted", "observed": "Observed"}


def run_mode(mode: str, graph: str = "") -> str:
    """How a run is driven, in words: "Hosted · graph NAME" or "Observed"."""
    label = MODES.get(mode, mode or "unknown")
    return f"{label} · graph {graph}" if mode == "hosted" and graph else label


# What other middleware (and the observer) reported, in words; the detail's names follow.
REPORTS: dict[str, str] = {
    "retry_exhausted": "Retry exhausted",
    "tool_error": "Tool error",
    "call_limit": "Call limit reached",
    "summarized": "History summarized",
    "context_edited": "Context edited",
    "model_failed": "Model failed",
    "evidence_dropped": "Evidence dropped",
    "value_redacted": "Value redacted",
    "no_handoff": "No handoffs",
    "no_verifier": "No verifier registered",
    "unseen_without_middleware": "Agent observed without SidewispMiddleware",
    "graph_error": "Graph error",
    "unobserved_stream": "Not driven through observe",
    "tool_call": "Tool call",
}
TOOL_OUTCOMES = {"ok": "returned", "error": "failed", "rejected": "was rejected by an approver"}


def report_text(kind: str, detail: dict | None) -> str:
    """One report as a sentence: evidence_dropped names the part and field it dropped."""
    detail = detail or {}
    if kind == "evidence_dropped":
        part, field = detail.get("part") or "?", detail.get("field")
        where = f"the {field} field of the {part} receipt" if field else f"the {part} receipt"
        why = detail.get("reason") or detail.get("code")
        text = f"{where[0].upper()}{where[1:]} could not be recorded as it was and was left out"
        return f"{text} ({why})" if why else text
    if kind == "value_redacted":
        part, field = detail.get("part") or "?", detail.get("field") or "?"
        where = {"report": f"The {field} of a report", "run": f"The run's {field}", "handoff": f"The handoff's {field}"}
        where = where.get(part, f"The {field} field of the {part} receipt")
        return (
            f"{where} held a value that may not be stored as it is (a credential shape, an absolute path, control "
            "characters or over 200 characters): it was stored as redacted: and a digest, and the rest was kept"
        )
    if kind == "tool_call":  # its duration is the entry's "took" (sidewisp.pages.history)
        outcome = detail.get("outcome")
        return f"Tool {detail.get('tool') or '?'} {TOOL_OUTCOMES.get(outcome, outcome or 'ended')}"
    if kind == "no_handoff":
        return "The run made no handoff: it is judged by its outcome alone"
    if kind == "graph_error":
        return _graph_error_text(detail)
    if kind == "unobserved_stream":
        return (
            "This run was not driven through observe: the reduced and destination receipts, which only the "
            "observer sees, are missing — run it with sidewisp_agent.observe(...) or observe.stream(...)"
        )
    if kind == "unseen_without_middleware":
        return (
            f"Agent {detail.get('agent') or '?'} runs without SidewispMiddleware: its transfers are proven from the "
            "graph's stream, but its retries, tool errors, call limits, summaries and single-agent steps are not "
            "seen. Add SidewispMiddleware() last in its middleware (README, “Bring your own agents”)"
        )
    if kind == "no_verifier":
        return (
            f"Graph {detail.get('graph') or '?'} has no verifier registered, so its completion claim is not proven "
            "(false completion). Add one: a verifier in its SIDEWISP_GRAPHS entry, or HostedGraph(verifier=...) "
            "from its factory (README, “Outcome verifiers”)"
        )
    return " · ".join(f"{name}: {value}" for name, value in detail.items())


def _graph_error_text(detail: dict) -> str:
    # The exception's message stays with the caller (it can carry arguments): class and place only.
    text = f"The graph raised {detail.get('error') or 'an exception'}"
    if detail.get("node"):
        text += f" in node {detail['node']}"
    if detail.get("tool"):
        text += f", tool {detail['tool']}"
    return text


# Each permission in words (receipts.actions keeps them, for the messages it writes): never a codename.
def permission(codename: str) -> str:
    from receipts.actions import PERMISSION_LABELS

    return PERMISSION_LABELS.get(codename, codename.split(".")[-1].replace("_", "-"))


# What a confirmation page confirms, as its title says it.
CONFIRM_TITLES: dict[str, str] = {
    "approve": "Approve",
    "reject": "Reject",
    "edit": "Edit and approve",
    "reassign": "Reassign",
    "cancel": "Cancel the wait",
    "reopen": "Reopen the task",
    "verify": "Verify again",
    "accept": "Accept as is",
    "resolve": "Mark resolved",
    "stop": "Stop auto-continue",
    "resume": "Resume auto-continue",
    "retry": "Retry from checkpoint",
}

# What moved a handoff's verdict (receipts.models.VerdictChange.cause), in words.
CAUSES: dict[str, str] = {
    "created": "created receipt",
    "reduced": "reduced receipt",
    "destination": "destination receipt",
    "wait": "wait receipt",
    "verification": "verification receipt",
    "final_status": "final status",
    "reclassified": "re-judged (time passed)",
    "settled": "settled (no more evidence due)",
    "task.accept": "accepted as is",
    "task.resolve": "marked resolved",
}

# A decision's kind, as the confirmation page of a decided wait says it.
DECISIONS: dict[str, str] = {
    "approve": "approved",
    "reject": "rejected",
    "edit": "approved with edited arguments",
    "reopen": "reopened (the task goes back to its agent)",
}

# Run health level (receipts.ingest.health) -> (icon, label, tone); only "healthy" is ever green.
HEALTH: dict[str, tuple[str, str, str]] = {
    "failing": ("✖", "Failing", "bad"),
    "attention": ("⚠", "Needs attention", "warn"),
    "waiting": ("◔", "Waiting", "wait"),
    "in_progress": ("▸", "In progress", "info"),
    "healthy": ("✔", "Healthy", "ok"),
}
HEALTH_UNKNOWN = ("•", "Not assessed yet", "muted")
# A healthy handoff inside a run that is not: the verdict is true of the handoff, but never green.
HANDOFF_OK_IN_BAD_RUN = ("✔", "Handoff healthy", "muted")
# A resolved wait whose action did not happen (spec §1 v1.1 resolution): its outcome, never a check mark.
WAIT_OUTCOMES: dict[str, tuple[str, str, str]] = {
    "rejected": ("✖", "Rejected", "muted"),
    "expired": ("⌛", "Expired — safe default applied", "warn"),
    "cancelled": ("⊘", "Cancelled", "muted"),
}

# The overview's time windows: key -> (label, seconds).
WINDOWS: dict[str, tuple[str, int]] = {
    "15m": ("15 min", 15 * 60),
    "1h": ("1 h", 3600),
    "24h": ("24 h", 24 * 3600),
    "7d": ("7 d", 7 * 24 * 3600),
}
DEFAULT_WINDOW = "1h"
