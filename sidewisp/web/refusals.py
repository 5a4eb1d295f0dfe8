"""Requests the pages cannot serve, answered in words: a refused query (400), an address too long (414), an
unreachable database (503).

Every request's query string passes `QueryStringMiddleware` before any of it reaches a view, a form, an admin
filter or the database (issue 29 §2: one place, not a decorator per view): one longer than MAX_QUERY_BYTES is
a 414; a NUL or an unpaired surrogate anywhere, names included, and a position (`page`, `older`, `newer`) that
is not a whole number in range are a 400 naming the parameter (`query_problem`). PostgreSQL refuses NUL in
text and integers past bigint, so each was a 500 before. A `?team=` that names none of the user's teams,
raised by any view, is a 400 too. A request line longer than daphne reads (16 KB) never reaches Django: the
server answers it 414 itself (`sidewisp.web.longlines`).

`DatabaseUnreachableMiddleware` answers a request that lost the database (OperationalError,
InterfaceError) with a 503 page saying so, and whether anything was done. An htmx request gets the words
as a fragment that the page script shows above the page (`#request-notice`), leaving the page as it was.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from django.db import InterfaceError, OperationalError, connection, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views import defaults

from receipts.ingest import storable
from receipts.org import teams

logger = logging.getLogger(__name__)

# No list is this long: a larger page number is a typo or a probe.
MAX_PAGE = 1_000_000
MAX_ROW_ID = 2**63 - 1  # a cursor names a row id (bigint)
POSITIONS = {"page": MAX_PAGE, "older": MAX_ROW_ID, "newer": MAX_ROW_ID}
MAX_NAME_SHOWN = 40
# No filter needs more: a 10 KB value still reaches the view, a longer query string is refused with a 414.
MAX_QUERY_BYTES = 12 * 1024
NOTICE_TARGET = "#request-notice"
API_PREFIX = "/api/"
# Set on a request once a write of its own committed: a database lost after that did not undo it.
COMMITTED_ATTRIBUTE = "sidewisp_committed"


def query_problem(params: QueryDict) -> str:
    """Why these query parameters cannot be a page's filters ("" when they can), naming the parameter."""
    for name, values in params.lists():
        for text in (name, *values):
            if what := storable.text_problem(text):
                return f"The parameter {_shown(name)} {what}, which no filter accepts."
        limit = POSITIONS.get(name)
        if limit is not None and any(value and not whole_number(value, limit) for value in values):
            return f"The parameter {name} must be a whole number from 1 to {limit:,}."
    return ""


class QueryStringMiddleware:
    """Every request's query string, checked once before any view reads it: too long (414) or refused (400)."""

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        size = len(request.META.get("QUERY_STRING", ""))
        if size > MAX_QUERY_BYTES:
            why = f"The address is too long: its query string is {size:,} bytes, over the limit of {MAX_QUERY_BYTES:,}."
            return _refused(request, why, status=414)
        if why := query_problem(request.GET):
            return _refused(request, why)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, teams.UnknownTeam):  # a `?team=` that is not the user's (issue 22 §2)
            return _refused(request, f"The parameter team: {exception}.")
        return None


def _refused(request: HttpRequest, why: str, *, status: int = 400) -> HttpResponse:
    if request.path.startswith(API_PREFIX):  # the API's callers read JSON, as its other refusals
        return JsonResponse({"error": {"field": "query", "message": why}}, status=status)
    if _wants_fragment(request):
        return _notice(render_to_string("sidewisp/_request_notice.html", {"why": why}), status=status)
    return render(request, "sidewisp/bad_request.html", {"why": why}, status=status)


def whole_number(value: str, limit: int) -> bool:
    """Whether `value` is a whole number from 1 to `limit`, in ASCII digits."""
    return value.isascii() and value.isdigit() and len(value) <= len(str(limit)) and 1 <= int(value) <= limit


def _shown(name: str) -> str:
    escaped = name.encode("unicode_escape").decode("ascii")
    return escaped if len(escaped) <= MAX_NAME_SHOWN else escaped[: MAX_NAME_SHOWN - 1] + "…"


class DatabaseUnreachableMiddleware:
    """A request that lost the database is a 503 page that says so and whether anything was done, not a 500.

    Whether anything was done is known, not guessed: every write statement of the request is noted, and
    counts once it committed. The page touches neither the database nor the session (both may be what
    failed). `server_error` and `bad_request` (the 500 and 400 handlers) answer the same for a middleware that
    lost it (the session's save: Django makes that a 400).
    """

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with connection.execute_wrapper(_WriteNotes(request)):
            return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return unreachable(request, exception) if isinstance(exception, OperationalError | InterfaceError) else None


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 handler: a lost database (raised outside a view, say by the session's save) is the 503 page."""
    if isinstance(exception := sys.exc_info()[1], OperationalError | InterfaceError):
        return unreachable(request, exception)
    return defaults.server_error(request)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The 400 handler: a session that could not be saved because the database went is the 503 page too."""
    lost = next((link for link in _causes(exception) if isinstance(link, OperationalError | InterfaceError)), None)
    if lost is not None:
        return unreachable(request, lost)
    return defaults.bad_request(request, exception)


def _causes(exception: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    link: BaseException | None = exception
    while link is not None and link not in found:
        found.append(link)
        link = link.__cause__ or link.__context__
    return found


def unreachable(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The 503 answer: the database is unreachable, and whether this request had committed a change first."""
    # The class name only: a driver's message can quote the statement's values.
    logger.warning("database unreachable: %s %s (%s)", request.method, request.path, type(exception).__name__)
    context = {"committed": getattr(request, COMMITTED_ATTRIBUTE, False), "action": request.method == "POST"}
    if _wants_fragment(request):
        return _notice(render_to_string("sidewisp/_unreachable.html", context), status=503)
    response = HttpResponse(render_to_string("sidewisp/unreachable.html", context), status=503)
    response["Retry-After"] = "10"
    return response


class _WriteNotes:
    """An execute wrapper: marks the request once one of its writes has committed (at once outside a transaction)."""

    def __init__(self, request: HttpRequest) -> None:
        self.request = request

    def __call__(self, execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if str(sql).lstrip()[:6].upper() in ("INSERT", "UPDATE", "DELETE"):
            if context["connection"].in_atomic_block:
                transaction.on_commit(self._committed, using=context["connection"].alias)
            else:
                self._committed()
        return result

    def _committed(self) -> None:
        setattr(self.request, COMMITTED_ATTRIBUTE, True)


def _wants_fragment(request: HttpRequest) -> bool:
    # django-htmx's request.htmx; read from the header too, for a request that failed before its middleware.
    htmx = getattr(request, "htmx", None)
    return bool(htmx and not htmx.boosted) if htmx is not None else request.headers.get("HX-Request") == "true"


def _notice(body: str, *, status: int) -> HttpResponse:
    """A fragment for the page's notice: swapped into #request-notice, the page and its URL left as they were."""
    response = HttpResponse(body, status=status)
    response["HX-Retarget"] = NOTICE_TARGET
    response["HX-Reswap"] = "innerHTML"
    response["HX-Push-Url"] = "false"
    return response
