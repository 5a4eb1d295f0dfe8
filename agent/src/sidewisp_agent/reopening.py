"""Reopening a false completion (spec §5 v1.3): the destination agent gets the task back from its checkpoint.

A reopen is a `Command` for the parent graph: `goto` the destination of the false-complete handoff, and
`update` its messages with one note that says which outcome verifier failed and its result, never the
verifier's own text. The note is a `SystemMessage` (it is Sidewisp speaking, not the user) with a fixed id:
`add_messages` replaces a message of the same id, so a re-delivered reopen adds no second note.

The end of a reopened run is verified again under an attempt of its own (`ending_attempt`): receipts are
idempotent per attempt, so the first run's "end" would otherwise store nothing new.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage
from langgraph.types import Command

NOTE_SOURCE = "sidewisp.reopen"
_TOKEN = re.compile(r"^[A-Za-z0-9_.:-]{1,80}$")


def reopen_note(verifier: str, result: str, token: str) -> SystemMessage:
    """The note the destination agent reads: the verifier's name and result only."""
    _check_token(token)
    text = (
        f"Sidewisp reopened this task: the outcome verifier {verifier} returned {result} after your last answer. "
        "Work on the task again; your outcome is verified again when you finish."
    )
    return SystemMessage(content=text, id=f"sidewisp-reopen-{token}", additional_kwargs={"lc_source": NOTE_SOURCE})


def reopen_command(destination: str, verifier: str, result: str, token: str) -> Command:
    """What the graph is driven with to reopen: the note added, the destination node scheduled."""
    if not destination:
        msg = "a reopen needs the destination agent of the false-complete handoff"
        raise ValueError(msg)
    return Command(goto=destination, update={"messages": [reopen_note(verifier, result, token)]})


def is_reopen_note(message: object) -> bool:
    return isinstance(message, BaseMessage) and message.additional_kwargs.get("lc_source") == NOTE_SOURCE


def was_reopened(messages: Any) -> bool:
    """The conversation holds a reopen note (a scripted agent reads this to work differently)."""
    return any(is_reopen_note(m) for m in messages or ())


def ending_attempt(graph_input: Any) -> str:
    """The attempt the run's end is verified under: "end", or "reopen-<token>" for a reopen's command."""
    if isinstance(graph_input, Command) and isinstance(graph_input.update, dict):
        for message in graph_input.update.get("messages") or ():
            if is_reopen_note(message):
                return f"reopen-{str(message.id).removeprefix('sidewisp-reopen-')}"
    return "end"


def _check_token(token: str) -> None:
    if not _TOKEN.match(token):
        msg = "a reopen token is 1 to 80 letters, digits or _.:-"
        raise ValueError(msg)
