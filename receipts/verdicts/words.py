"""The words a verdict is shown by, everywhere: pages, alerts, alert-rule forms, CSV and notifications.

Plain Python (the evidence domain's notifications and admin read it, and so does sidewisp.pages.labels,
which adds icons and tones for the pages): one label per verdict code, so a verdict never reads two ways.
"""

from __future__ import annotations

# verdict code -> its words. The order is the glossary's: healthy, waiting, then the failures by boundary.
VERDICT_WORDS: dict[str, str] = {
    "HEALTHY": "Healthy",
    "WAITING_ON_APPROVAL": "Waiting on approval",
    "UNCERTAIN": "Uncertain",
    "ROUTE_REJECTED": "Route rejected",
    "STALE_CONTROL": "Stale control",
    "OPEN_TOOL_PROTOCOL": "Open tool protocol",
    "CONTEXT_INCOMPLETE": "Context incomplete",
    "DESTINATION_NOT_STARTED": "Destination not started",
    "FALSE_COMPLETE": "False complete",
}

# A verdict an alert can watch: every one but HEALTHY (an alert on health is noise, never news).
ALERTABLE = tuple(code for code in VERDICT_WORDS if code != "HEALTHY")


def verdict_words(code: str) -> str:
    """The words of a verdict code; a code that is no verdict is shown as it is."""
    return VERDICT_WORDS.get(code, code)


def alert_choices() -> list[tuple[str, str]]:
    """The verdicts an alert rule may watch, as (code, words) choices: by name, HEALTHY not offered."""
    return [(code, VERDICT_WORDS[code]) for code in ALERTABLE]
