"""Pages of a long list: by a cursor (keyset, stable while rows arrive) or by number with a known total."""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.db.models import Q, QuerySet

from receipts.queries.dashboard.counts import COUNT_BOUND, BoundedCount, bounded_count


@dataclass
class KeysetPage:
    """One page of a list ordered newest first by (`field`, pk), found from a cursor rather than an offset.

    `older` / `newer` are the cursors (a row's pk) for the next page either way, None at an end. The
    Page-like attributes (`paginator.count`, `has_other_pages`) serve the list templates.
    """

    object_list: list
    count: BoundedCount
    older: int | None = None
    newer: int | None = None
    keyset = True

    @property
    def paginator(self) -> KeysetPage:
        return self

    @property
    def has_other_pages(self) -> bool:
        return self.older is not None or self.newer is not None

    def __iter__(self):
        return iter(self.object_list)

    def __len__(self) -> int:
        return len(self.object_list)


@dataclass
class OffsetPage:
    """A numbered page whose total is known from elsewhere (a stored count): "next" comes from the rows
    themselves (one more is read), so the links stay right even while the stored total lags a change.

    Django's Page interface as far as the list templates read it.
    """

    object_list: list
    number: int
    size: int
    count: int
    has_next: bool

    @property
    def paginator(self) -> OffsetPage:
        return self

    @property
    def num_pages(self) -> int:
        return max(math.ceil(self.count / self.size), self.number + self.has_next, 1)

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_other_pages(self) -> bool:
        return self.has_previous or self.has_next

    def previous_page_number(self) -> int:
        return self.number - 1

    def next_page_number(self) -> int:
        return self.number + 1

    def start_index(self) -> int:
        return (self.number - 1) * self.size + 1 if self.object_list else 0

    def end_index(self) -> int:
        return (self.number - 1) * self.size + len(self.object_list)

    def __iter__(self):
        return iter(self.object_list)


def offset_page(queryset: QuerySet, number: object, size: int, *, count: int) -> OffsetPage:
    """Page `number` (1 when it is not a positive whole number) of `queryset`, `count` rows in all."""
    number = int(number) if str(number).isdigit() and int(number) > 0 else 1
    start = (number - 1) * size
    rows = list(queryset[start : start + size + 1])
    return OffsetPage(rows[:size], number, size, count, has_next=len(rows) > size)


def keyset_page(
    queryset: QuerySet,
    *,
    field: str,
    size: int,
    older: int | None = None,
    newer: int | None = None,
    count_bound: int = COUNT_BOUND,
    count_in_order: bool = False,
) -> KeysetPage:
    """The `size` rows of `queryset` after the row `older` (or before the row `newer`), newest first by
    (`field`, pk); the first page without either. Three queries at most: the bounded count, the cursor row,
    the rows.

    Stable while rows arrive: a row is on exactly one page whichever way one walks (pk breaks ties). A
    cursor row that no longer exists starts from the first page.
    """
    count = bounded_count(queryset, count_bound, order=(f"-{field}", "-pk") if count_in_order else ())
    if not count:
        return KeysetPage([], count)
    cursor = older if older is not None else newer
    anchor = queryset.model.objects.filter(pk=cursor).values_list(field, flat=True).first() if cursor else None
    if anchor is None:
        rows = list(queryset.order_by(f"-{field}", "-pk")[: size + 1])
        return KeysetPage(rows[:size], count, older=rows[size - 1].pk if len(rows) > size else None)
    if older is not None:
        after = queryset.filter(Q(**{f"{field}__lt": anchor}) | Q(**{field: anchor, "pk__lt": older}))
        rows = list(after.filter(**{f"{field}__lte": anchor}).order_by(f"-{field}", "-pk")[: size + 1])
        return KeysetPage(
            rows[:size],
            count,
            older=rows[size - 1].pk if len(rows) > size else None,
            newer=rows[0].pk if rows else older,
        )
    before = queryset.filter(Q(**{f"{field}__gt": anchor}) | Q(**{field: anchor, "pk__gt": newer}))
    rows = list(before.filter(**{f"{field}__gte": anchor}).order_by(field, "pk")[: size + 1])
    if len(rows) <= size:  # back at the top: the first page, whole
        return keyset_page(queryset, field=field, size=size, count_bound=count_bound)
    shown = rows[:size][::-1]
    return KeysetPage(shown, count, older=shown[-1].pk, newer=shown[0].pk)
