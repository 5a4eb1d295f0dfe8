"""`{% run_history run %}`: the run page's history section; `{% action_history_link result %}`: the
result page's link to the entry its action made (sidewisp.pages.history)."""

from __future__ import annotations

from django import template

from receipts import actions
from receipts.models import Run
from sidewisp.pages import history, history_words

register = template.Library()


@register.inclusion_tag("sidewisp/_history.html", takes_context=True)
def run_history(context: template.Context, run: Run) -> dict:
    """The newest entries of `run`'s history, swapped live with the run page (out of band from the socket). A live
    render gives its entries their markup kept from an earlier render (`reuse_entries`, sidewisp.live.render)."""
    section = history.section_context(run, context.get("user"), section=True)
    reuse = context.get("reuse_entries")
    if reuse is not None:
        reuse(section["history"].entries)
    return {**section, "oob": context.get("oob", False), "section": True}


@register.filter
def part_words(code: str) -> str:
    return history_words.part(code)


@register.filter
def attempt_words(code: str) -> str:
    return history_words.attempt(code)


@register.filter
def final_words(status: str) -> str:
    return history_words.final(status)


@register.inclusion_tag("sidewisp/_history_link.html", takes_context=True)
def action_history_link(context: template.Context, result: actions.Result) -> dict:
    """The link to the entry `result`'s action made, found by the action's one-time key: the page's own
    (`action_key`, a result page reached by a redirect) or the POST's."""
    request = context.get("request")
    key = context.get("action_key") or (request.POST.get("key", "") if request is not None else "")
    entry = history.action_entry(result, key)
    return {"entry": entry, "url": history.entry_url(entry) if entry is not None else ""}
