"""Where in a newest-first list a page is: a page number up to MAX_NUMBERED_PAGE, a cursor beyond."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from django import forms
from django.http import QueryDict

from receipts.queries import dashboard

# Lists served by page number (OFFSET) up to this page; deeper pages go by cursor (`?older=` / `?newer=`).
MAX_NUMBERED_PAGE = 40
# The query parameters that say where in a list a page is (kept out of the links' filter query).
POSITION_PARAMS = ("page", "older", "newer")


def list_page(
    queryset, field: str, size: int, position: Mapping, *, count_in_order: bool = False
) -> dashboard.KeysetPage:
    """A page of a newest-first list: by cursor (`older`/`newer`), or by a page number up to
    MAX_NUMBERED_PAGE (an OFFSET that deep stays cheap; the view redirects deeper numbers).

    `count_in_order`: the total is counted newest first too (`dashboard.bounded_count`'s `order`)."""
    order = (f"-{field}", "-pk")
    number = position.get("page")
    if number and number > 1 and not (position.get("older") or position.get("newer")):
        start = (number - 1) * size
        rows = list(queryset.order_by(*order)[start : start + size + 1])
        shown = rows[:size]
        older = shown[-1].pk if len(rows) > size else None
        count = dashboard.bounded_count(queryset, order=order if count_in_order else ())
        return dashboard.KeysetPage(shown, count, older=older, newer=shown[0].pk if shown else None)
    return dashboard.keyset_page(
        queryset,
        field=field,
        size=size,
        older=position.get("older"),
        newer=position.get("newer"),
        count_in_order=count_in_order,
    )


def too_deep_query(params: QueryDict | Mapping[str, str]) -> str | None:
    """Where a page number past MAX_NUMBERED_PAGE goes ("?filters&page=40"): the deepest numbered page,
    from which "Older" walks on by cursor (an OFFSET that deep would read every row before it)."""
    number = flat(params).get("page", "")
    if not number.isdigit() or int(number) <= MAX_NUMBERED_PAGE:
        return None
    return "?" + urlencode({**filter_query(params), "page": MAX_NUMBERED_PAGE})


def filter_query(params: QueryDict | Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in flat(params).items() if k not in POSITION_PARAMS and v}


class ListPositionForm(forms.Form):
    """Where in a newest-first list a page is: a page number (shallow) or a cursor either way."""

    page = forms.IntegerField(required=False, min_value=1, max_value=MAX_NUMBERED_PAGE)
    older = forms.IntegerField(required=False, min_value=1)
    newer = forms.IntegerField(required=False, min_value=1)

    def position(self) -> dict:
        self.is_valid()
        return {k: v for k, v in getattr(self, "cleaned_data", {}).items() if v is not None}


def flat(params: QueryDict | Mapping[str, str]) -> dict[str, str]:
    return params.dict() if isinstance(params, QueryDict) else dict(params)
