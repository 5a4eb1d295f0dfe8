"""`{% run_team_map run %}`: the run page's map of the path its run took (sidewisp.pages.mappage.run_map)."""

from __future__ import annotations

from django import template

from receipts.models import Run
from sidewisp.pages import mappage

register = template.Library()


@register.inclusion_tag("teammap/_map.html", takes_context=True)
def run_team_map(context: template.Context, run: Run) -> dict:
    """The map of `run`, swapped live with the run page (out of band when the socket renders it)."""
    return {"map": mappage.run_map(run), "oob": context.get("oob", False), "run": run}
