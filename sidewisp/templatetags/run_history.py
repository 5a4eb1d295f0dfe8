"""`{% run_history run %}`: the run page's history section; `{% action_history_link result key %}`: the
result page's link to the entry its action made (sidewisp.history)."""

from __future__ import annotations

from django import template

from receipts import actions
from receipts.models import Run
from sidewisp import history

register = template.Library()


@register.inclusion_tag("sidewisp/_history.html", takes_context=True)
def run_history(context: template.Context, run: Run) -> dict:
    """The newest entries of `run`'s history, swapped live with the run page (out of band from the socket)."""
    section = history.section_context(run, context.get("user"))
    return {**section, "oob": context.get("oob", False), "section": True}


@register.inclusion_tag("sidewisp/_history_link.html")
def action_history_link(result: actions.Result, key: str | None) -> dict:
    entry = history.action_entry(result, key or "")
    return {"entry": entry, "url": history.entry_url(entry) if entry is not None else ""}
