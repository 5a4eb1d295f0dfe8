"""The live pages' fragments: one render of a page for one audience, and the messages cut from it.

A render is the page's fragments as out-of-band swaps (`LivePage`), built from
the same context builders and templates as the page itself (`sidewisp.pages`).
A list page (runs, waits, false completions) also has its rows one by one and
the parts around them, so a change can be sent as the rows that changed; its
whole fragments are rendered only when a message needs them (a snapshot, or a
change the rows cannot say). A run row whose run did not change is not
rendered again, nor is a run page's handoff card whose handoff did not, nor
its history entries that did not: their markup is kept (`sidewisp.live.reuse`)
for ROW_REUSE_SECONDS, keyed by every value it is rendered from.

`pages.render_live` and the other names here stay importable from
`sidewisp.pages`, where they were.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

from django.contrib.auth.models import User
from django.http import QueryDict
from django.template.loader import render_to_string

from receipts import actions
from receipts.org import teams
from receipts.queries import dashboard
from sidewisp.live import reuse
from sidewisp.pages import mappage
from sidewisp.pages.falsecompletions import false_context
from sidewisp.pages.overview import overview_context
from sidewisp.pages.runpage import run_context
from sidewisp.pages.runs import runs_context
from sidewisp.pages.scope import PageScope
from sidewisp.pages.waits import waits_context

# The fragments each page swaps live, by template; each has a stable id.
_FRAGMENTS: dict[str, tuple[str, ...]] = {
    "overview": (
        "sidewisp/_run_status.html",
        "sidewisp/_window.html",
        "sidewisp/_counts.html",
        "sidewisp/_newest.html",
        "sidewisp/_soonest.html",
        "sidewisp/_false_short.html",
    ),
    "runs": ("sidewisp/_runs_list.html",),
    "run": ("sidewisp/_run.html", "teammap/_run_map.html", "sidewisp/_run_history.html"),  # + its history (issue 21 §1)
    "waits": ("sidewisp/_waits.html",),
    "false": ("sidewisp/_false_completions.html",),
    "map": ("teammap/_map.html",),  # the team map (sidewisp.pages.mappage)
}


@dataclass(frozen=True)
class LiveList:
    """A list page's live shape: its rows swap one by one, the parts around them (counts, pager) whole."""

    rows_id: str  # the <ul> that holds the rows
    row_template: str
    items: str  # the rows' context key
    name: str  # what the row template calls one row
    row_id: str  # the rows' id prefix ("run-row" for id="run-row-12")
    row_context: tuple[tuple[str, object], ...]  # what the list template passes its row template
    around: tuple[str, ...]  # the other parts' templates, each one element with its own id
    reusable: bool = False  # a row is its item's values alone (no offers, no clock but <time>): markup reused


_LISTS: dict[str, LiveList] = {
    "runs": LiveList(
        "runs-rows",
        "sidewisp/_run_row.html",
        "runs",
        "run",
        "run-row",
        (),
        ("sidewisp/_runs_count.html", "sidewisp/_list_pager.html"),
        reusable=True,
    ),
    "waits": LiveList(
        "waits-rows",
        "sidewisp/_wait_line.html",
        "waits",
        "h",
        "wait",
        (("prefix", "wait"), ("label", "Pages of open waits"), ("previous", "Sooner"), ("next", "Later")),
        ("sidewisp/_waits_summary.html", "sidewisp/_list_pager.html", "sidewisp/_waits_resolved.html"),
    ),
    "false": LiveList(
        "false-rows",
        "sidewisp/_handoff_line.html",
        "false_completions",
        "h",
        "false",
        (("prefix", "false"), ("actions", True)),
        ("sidewisp/_false_summary.html", "sidewisp/_list_pager.html"),
    ),
}
_PAGER_IDS = {"runs": ("runs-pager", "#runs-live"), "waits": ("waits-pager", ""), "false": ("false-pager", "")}


@dataclass(frozen=True)
class LivePage:
    """One render of a page's live fragments for one audience, from which every socket's message is cut.

    `fragments` are the whole fragments (out-of-band, by id); a list page also has its `rows` in order
    (row id -> markup) and the parts `around` them, so a change can be sent as the rows that changed.
    A list page's whole fragments may be rendered on first need (`render_whole`), on a render thread:
    cut its messages there (`live` does).
    """

    scope: PageScope
    fragments: tuple[str, ...] = ()
    run_seq: tuple[int, int] | None = None  # the run page's (run id, sequence) for a snapshot's baseline
    rows: tuple[tuple[str, str], ...] | None = None
    around: tuple[str, ...] = ()
    render_whole: Callable[[], tuple[str, ...]] | None = field(default=None, compare=False, repr=False)

    @cached_property
    def whole(self) -> tuple[str, ...]:
        return self.render_whole() if self.render_whole is not None else self.fragments

    @cached_property
    def unclocked(self) -> tuple[str, ...]:
        """`whole` without its clock words (`_without_clock`), worked out once: the next render compares with
        it too (a run page's fragments are large, each pass over them a millisecond or more)."""
        return tuple(map(_without_clock, self.whole))

    def snapshot(self) -> str:
        """Everything, with a marker that gives the page its baseline sequence."""
        seqs = [[self.run_seq[0], [self.run_seq[1]]]] if self.run_seq else []
        return _with_marker(list(self.whole), {"kind": "snapshot", "seqs": seqs})

    def changes_since(self, before: LivePage | None, seqs: Iterable[tuple[int, list[int]]]) -> str:
        """What a page showing `before` needs to show this: the changed fragments (the changed, new and
        removed rows of a list) and the events' marker; "" when nothing changed and no event is named."""
        marker = {"kind": "events", "seqs": [[run, sorted(numbers)] for run, numbers in seqs]}
        parts = self._row_changes(before) if before is not None else None
        if parts is None:
            previous = set(before._unclocked_if_rendered()) if before is not None else set()
            parts = [f for f, bare in zip(self.whole, self.unclocked, strict=True) if bare not in previous]
        if not parts and not marker["seqs"]:
            return ""
        return _with_marker(parts, marker)

    def _unclocked_if_rendered(self) -> tuple[str, ...]:
        # Not rendered (nothing needed it): nothing to compare with, so every fragment counts as changed.
        return self.unclocked if self.render_whole is None or "whole" in self.__dict__ else ()

    def _row_changes(self, before: LivePage) -> list[str] | None:
        # Rows are sent one by one only while both renders have rows and the ones that stay keep their
        # order (new rows slot in where they belong, e.g. the newest first); otherwise the whole list.
        if not self.rows or not before.rows:
            return None
        old, new = dict(before.rows), dict(self.rows)
        if [k for k, _ in before.rows if k in new] != [k for k, _ in self.rows if k in old]:
            return None
        listed = _LISTS[self.scope.page]
        parts = [_row_swap(row_id, remove=True) for row_id in old if row_id not in new]
        # From the last row up, each new or changed row goes before the one that follows it (in place by then).
        place = f"beforeend:#{listed.rows_id}"
        placed: list[str] = []
        for row_id, markup in reversed(self.rows):
            if row_id not in old or _without_clock(old[row_id]) != _without_clock(markup):
                placed.append(_row_swap(row_id, remove=row_id in old, markup=markup, place=place))
            place = f"beforebegin:#{row_id}"
        shown = {_without_clock(part) for part in before.around}
        return parts + placed + [part for part in self.around if _without_clock(part) not in shown]


# The words of a relative time or a countdown ("3 minutes ago", "due in 0h 04m"): the page script keeps
# them current from their datetime, so a render that differs only in them is no change.
_CLOCK_TEXT = re.compile(r'(<time class="(?:moment|countdown)[^>]*>)[^<]*(</time>)')


def _without_clock(markup: str) -> str:
    return _CLOCK_TEXT.sub(r"\1\2", markup)


def _row_swap(row_id: str, *, remove: bool, markup: str = "", place: str = "") -> str:
    context = {"row_id": row_id, "remove": remove, "markup": markup, "place": place}
    return render_to_string("sidewisp/_oob_row.html", context)


def _with_marker(parts: list[str], marker: dict) -> str:
    parts.append(render_to_string("sidewisp/_ws_seq.html", {"marker": json.dumps(marker), "oob": True}))
    return "\n".join(parts)


# Pages whose fragments are built without the user and offer nothing: every viewer is one audience there,
# so all their sockets share one render per change.
SHARED_PAGES = frozenset({"runs", "map"})
EVERY_VIEWER = ("every viewer",)


def audience(scope: PageScope, user: User) -> tuple:
    """What makes `user`'s fragments of `scope` differ from someone else's: sockets with equal audiences
    are sent one and the same render.

    The fragments offer what the role permits (permissions); the name counts where the page filters by
    it (`mine`) or an owner rule reads it (deciding one's own waits and no others). On SHARED_PAGES
    nothing of the role differs. Every audience ends with the teams whose runs its fragments show (issue 22
    §2): sockets of two team sets never share a render.
    """
    team_key = teams.audience_key(user)
    if scope.page in SHARED_PAGES:
        return (*EVERY_VIEWER, team_key)
    named = scope.mine or (user.has_perm(actions.DECIDE_OWN) and not user.has_perm(actions.DECIDE_ANY))
    permissions = (user.is_superuser, tuple(sorted(user.get_all_permissions())), user.get_username() if named else "")
    return (*permissions, team_key)


def team_refused(scope: PageScope, user: User) -> bool:
    """Whether the page's `?team=` names a team that is not the user's (its socket is closed)."""
    try:
        teams.scope_for(user, QueryDict(scope.query).get("team") or "")
    except teams.UnknownTeam:
        return True
    return False


def _context_for(scope: PageScope, user: User) -> dict | None:
    query = QueryDict(scope.query)
    team = query.get("team") or ""
    builders: dict[str, Callable[[], dict | None]] = {
        "overview": lambda: overview_context(user, query.get("window") or "", team),
        "runs": lambda: runs_context(query, user),
        "run": lambda: _run_context_or_none(scope.run_id, user, _page_number(scope)),
        "waits": lambda: waits_context(user, mine=scope.mine, page=_page_number(scope), team=team),
        "false": lambda: false_context(user, _page_number(scope)),
        "map": lambda: _map_context(scope, user),
    }
    return builders[scope.page]()


def _map_context(scope: PageScope, user: User) -> dict:
    return mappage.map_context(QueryDict(scope.query), user)


def _page_number(scope: PageScope) -> str:
    return QueryDict(scope.query).get("page") or "1"


def _run_context_or_none(run_id: int | None, user: User, page: object = 1) -> dict | None:
    visible = teams.visible_runs(user)
    run = visible.filter(pk=run_id).first()  # another team's run: nothing (issue 22 §2)
    return run_context(run, user, page, visible) if run is not None else None


def change_marker(scope: PageScope) -> tuple:
    return dashboard.change_marker(scope.run_id if scope.page == "run" else None)


def render_live(scope: PageScope, user: User) -> LivePage | None:
    """The page's live fragments for `user` (whose role decides what they offer); None if the page is gone.

    The user's teams are read once for the render (`teams.resolved_scopes`), not compiled into each query."""
    with teams.resolved_scopes():
        return _render_live(scope, user)


def _render_live(scope: PageScope, user: User) -> LivePage | None:
    context = _context_for(scope, user)
    if context is None:
        return None
    context["user"] = user
    listed = _LISTS.get(scope.page)
    if listed is not None:
        context["pager_id"], context["target"] = _PAGER_IDS[scope.page]
        if scope.page == "runs":
            context["runs"] = context["page_obj"].object_list
    context["oob"] = True
    if listed is None:
        if scope.page == "run":
            _reuse_cards(context)
            context["reuse_entries"] = _reuse_entries
        fragments = tuple(render_to_string(template, context) for template in _FRAGMENTS[scope.page])
        run_seq = (context["run"].pk, context["run"].seq) if scope.page == "run" else None
        return LivePage(scope, fragments, run_seq=run_seq)
    row_context = {**context, **dict(listed.row_context)}
    rows = tuple((f"{listed.row_id}-{item.pk}", _row(listed, row_context, item)) for item in context[listed.items])
    around = tuple(render_to_string(template, context) for template in listed.around)
    whole = _FRAGMENTS[scope.page]
    return LivePage(scope, rows=rows, around=around, render_whole=lambda: _render_all(whole, context))


def _render_all(templates: tuple[str, ...], context: dict) -> tuple[str, ...]:
    return tuple(render_to_string(template, context) for template in templates)


def _row(listed: LiveList, row_context: dict, item) -> str:
    if not listed.reusable:
        return render_to_string(listed.row_template, {**row_context, listed.name: item})
    key = (listed.row_template, item.pk, _values(item))
    markup = _rows.get(key)
    if markup is None:
        markup = render_to_string(listed.row_template, {**row_context, listed.name: item})
        _rows.put(key, markup)
    return markup


def _values(item) -> str:
    """Every value a model row was read with (fields and annotations), as one comparable string."""
    return repr(sorted((name, value) for name, value in vars(item).items() if name != "_state"))


CARD_TEMPLATE = "sidewisp/_handoff_card.html"


def _reuse_cards(context: dict) -> None:
    """Give each of a run page's timeline items its card's markup (`item.card`, which `_run.html` shows
    instead of rendering the card): kept from an earlier render while its key (`_card_key`) is the same,
    rendered now otherwise. The cards were most of the run page's render, and a change of the run changes
    one or two of them."""
    offers = context.get("offers")
    shared = (offers, reuse.digest(offers))  # every card's `offers` is the run's: digested once, not per card
    for item in context["timeline"]:
        key = _card_key(item, context, shared)
        markup = _rows.get(key) if key is not None else None
        if markup is None:
            markup = render_to_string(CARD_TEMPLATE, {**context, "h": item.handoff, "grid": item.grid})
            if key is not None:
                _rows.put(key, markup)
        item.card = markup


ENTRY_TEMPLATE = "sidewisp/_history_entry.html"


def _reuse_entries(entries: list) -> None:
    """Give each of a run page's history entries its markup (`entry.markup`, which `_history.html` shows instead
    of rendering the entry): kept from an earlier render while every value of the entry (its row and handoff with
    theirs, its words, links and sequence number) is the same, rendered now otherwise. The entry template reads
    nothing but its entry; its twenty renders were a fifth of the run page's history section. Left out: the count
    of the history's rows its query read beside it (`history_matching`, which every new entry changes)."""
    for entry in entries:
        values = {name: value for name, value in vars(entry).items() if name != "row"}
        row = {name: value for name, value in vars(entry.row).items() if name not in ("_state", "history_matching")}
        digest = reuse.digest((values, row, entry.row._state.fields_cache))
        key = (ENTRY_TEMPLATE, entry.kind, entry.pk, digest) if digest is not None else None
        markup = _rows.get(key) if key is not None else None
        if markup is None:
            markup = render_to_string(ENTRY_TEMPLATE, {"e": entry})
            if key is not None:
                _rows.put(key, markup)
        entry.markup = markup


def _card_key(item, context: dict, shared: tuple = (None, None)) -> tuple | None:
    """Every value a handoff card is rendered from, digested: the handoff's fields and everything the page
    attached to it for this user (evidence, verdict history, offers, links, notes, the wait's story), its grid,
    its run's health and whether its wait is overdue `now`; None when a value cannot be digested (the card is
    then rendered). The run itself is left out (its sequence changes with every event, the cards show only
    its health). `shared` is (the page's offers, their digest): a card's offers are that digest when they are
    those; its verdict changes are their values (`reuse.fields`: what pickling a model instance copies first)."""
    h = item.handoff
    values = {name: value for name, value in vars(h).items() if name != "_state"}  # the run is in `_state`
    if shared[1] is not None and values.get("offers") is shared[0]:
        values["offers"] = shared[1]
    if isinstance(values.get("history"), list):
        values["history"] = [reuse.fields(change) for change in values["history"]]
    overdue = bool(h.wait_open and h.wait_deadline and h.wait_deadline <= context["now"])
    digest = reuse.digest((values, item.grid, h.run.health, overdue, context.get("decided_shown")))
    return (CARD_TEMPLATE, h.pk, digest) if digest is not None else None


_rows = reuse.rows  # by (template, id, values), each kept reuse.ROW_REUSE_SECONDS


def cut_messages(
    page: LivePage, shown: LivePage | None, seqs: dict, snapshot: bool, audience: tuple
) -> tuple[str, str]:
    """On a render thread (a list's whole fragments are rendered there when needed): the newcomers'
    snapshot ("" without newcomers) and everyone else's message ("" when there is nothing to say).

    The marker never names a run of a team the audience does not see (issue 22 §2; one query, only for an
    audience limited to some teams)."""
    if seqs and teams.limited(audience):
        hidden = teams.hidden_from_audience(audience, list(seqs))
        seqs = {run: numbers for run, numbers in seqs.items() if run not in hidden}
    return page.snapshot() if snapshot else "", page.changes_since(shown, sorted(seqs.items()))


def render_oob(scope: PageScope, user: User, seqs: Iterable[tuple[int, list[int]]], *, snapshot: bool) -> str:
    """The page's live fragments as out-of-band swaps, then the sequence marker the page script reads.

    `seqs` are (run id, [event sequence numbers]) seen since the last render; a
    snapshot carries the run's current sequence instead, so the page has a baseline.
    """
    page = render_live(scope, user)
    if page is None:
        return ""
    return page.snapshot() if snapshot else page.changes_since(None, seqs)
