"""Which page a browser shows (`PageScope`: page, run, filters), and the team switcher every list page offers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, urlencode

from django.http import QueryDict

from receipts.actions import User
from receipts.org import teams
from sidewisp.web import refusals

PAGES = ("overview", "runs", "run", "waits", "false", "map")


@dataclass(frozen=True)
class PageScope:
    page: str
    run_id: int | None = None
    mine: bool = False
    query: str = ""  # the page's own query string (filters and page number)

    @classmethod
    def from_query_string(cls, raw: bytes | str) -> PageScope | None:
        """The scope a socket asked for (`?page=run&run=12`), or None when it makes no sense."""
        text = raw.decode("latin-1") if isinstance(raw, bytes) else raw
        params = {k: v[0] for k, v in parse_qs(text).items()}
        page = params.pop("page", "")
        if page not in PAGES:
            return None
        run_id = params.pop("run", "")
        query = params.get("filters", "")
        if refusals.query_problem(QueryDict(query)):
            return None  # what the page itself would refuse (issue 19 §2)
        if page == "run":
            valid = refusals.whole_number(run_id, refusals.MAX_ROW_ID)
            return cls(page, run_id=int(run_id), query=query) if valid else None
        if page == "waits":
            return cls(page, mine=params.get("mine") == "1", query=query)
        if page in ("runs", "false", "overview", "map"):
            return cls(page, query=query)
        return cls(page)

    def ws_url(self) -> str:
        params: dict[str, str] = {"page": self.page}
        if self.run_id is not None:
            params["run"] = str(self.run_id)
        if self.mine:
            params["mine"] = "1"
        if self.query:
            params["filters"] = self.query  # the page's own query, page number included
        return f"/ws/health/?{urlencode(params)}"

    def is_affected_by(self, event: Mapping) -> bool:
        if self.page == "run":
            return event.get("run") == self.run_id
        if self.page in ("waits", "false"):
            return event.get("type") == "handoff.changed"
        return True


def team_switch(user: User, seen: teams.Scope, keep: Mapping[str, str]) -> dict | None:
    """The team switcher (issue 22 §2): a link to all of the user's teams and one to each, keeping the page's
    other parameters `keep`; None for a user in one team (or none), who sees no switcher."""
    choices = teams.switchable(user)
    if len(choices) < 2:
        return None
    links = [("", "All teams", urlencode(keep))]
    links += [(slug, name, urlencode({**keep, "team": slug})) for slug, name in choices]
    return {"links": links, "chosen": seen.team}
