"""Words and icons for verdicts and boundary states: never colour alone."""

from __future__ import annotations

# verdict -> (icon, label, tone); the tone picks a colour, the icon and label carry the meaning.
VERDICTS: dict[str, tuple[str, str, str]] = {
    "HEALTHY": ("✔", "Healthy", "ok"),
    "WAITING_ON_APPROVAL": ("◔", "Waiting on approval", "wait"),
    "UNCERTAIN": ("?", "Uncertain", "warn"),
    "FALSE_COMPLETE": ("✖", "False complete", "bad"),
    "ROUTE_REJECTED": ("✖", "Route rejected", "bad"),
    "STALE_CONTROL": ("✖", "Stale control", "bad"),
    "OPEN_TOOL_PROTOCOL": ("✖", "Open tool protocol", "bad"),
    "CONTEXT_INCOMPLETE": ("✖", "Context incomplete", "bad"),
    "DESTINATION_NOT_STARTED": ("✖", "Destination not started", "bad"),
}

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
