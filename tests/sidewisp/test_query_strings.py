"""Every request's query string is checked in one place (issue 29 §2): no URL and no admin filter answers 5xx.

The walk below takes every pattern of the URLconf (the admin's included) and every registered ModelAdmin's list
filters, search and changelist parameters, and sends each parameter a NUL, a lone surrogate (as UTF-8 bytes:
Django reads them as U+FFFD, and as a surrogate nowhere), 1e400 and a 10 KB value, as every role, on the real
database. A new page or admin filter is walked without editing this file.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from urllib.parse import quote

import pytest
from django.conf import settings
from django.contrib import admin
from django.db import transaction
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver, resolve
from django.urls.exceptions import Resolver404
from django.utils.regex_helper import normalize

from receipts.models import Handoff, Run
from sidewisp.ops import health
from sidewisp.web.refusals import MAX_QUERY_BYTES
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db

VALUES = {"NUL": "%00", "lone surrogate": "%ED%A0%80", "1e400": "1e400", "10 KB": "x" * 10 * 1024}
# The names the operator pages read (their forms' fields and the positions), and the admin's own.
PAGE_NAMES = ["team", "window", "q", "health", "verdict", "graph", "route_version", "agent", "sender", "receiver"]
PAGE_NAMES += ["status", "since", "until", "page", "older", "newer", "mine", "actor", "action", "outcome"]
PAGE_NAMES += ["handoff", "before", "next", "filters", "run", "token"]
ADMIN_NAMES = ["_changelist_filters", "_popup", "_to_field", "next"]  # every admin page's
CHANGELIST_NAMES = ["q", "p", "o", "e", "all", "_facets", *ADMIN_NAMES]  # a list's, with its filters'
SHORT = ("NUL", "lone surrogate", "1e400")  # every parameter at once
ROLES = ["anonymous", "viewer", "operator", "approver", "admin", "superuser"]


def _patterns(resolvers=None, prefix: str = "") -> list[str]:
    """Every pattern of the URLconf as a path, each argument filled with a value that resolves."""
    found = []
    for entry in get_resolver().url_patterns if resolvers is None else resolvers:
        regex = prefix + entry.pattern.regex.pattern.lstrip("^").rstrip("$").replace("\\Z", "")
        if isinstance(entry, URLResolver):
            found += _patterns(entry.url_patterns, regex)
            continue
        assert isinstance(entry, URLPattern)
        for template, params in normalize(regex):
            for sample in ("1", "receipts", "x"):
                path = "/" + template % dict.fromkeys(params, sample)
                try:
                    resolve(path)
                except Resolver404:
                    continue
                found.append(path)
                break
    return sorted(set(found))


def _admin_names(model_admin, superuser) -> list[str]:
    """The parameters the changelist of `model_admin` reads: its filters' (as the admin names them) and its own."""
    request = RequestFactory().get("/")
    request.user = superuser
    changelist = model_admin.get_changelist_instance(request)
    names = [name for spec in changelist.filter_specs for name in spec.expected_parameters()]
    if model_admin.date_hierarchy:
        names += [f"{model_admin.date_hierarchy}__{part}" for part in ("year", "month", "day")]
    return [*names, *CHANGELIST_NAMES]


def _targets(superuser) -> dict[str, list[str]]:
    targets = {path: ADMIN_NAMES if path.startswith("/admin/") else PAGE_NAMES for path in _patterns()}
    for model, model_admin in admin.site._registry.items():
        path = f"/admin/{model._meta.app_label}/{model._meta.model_name}/"
        targets[path] = _admin_names(model_admin, superuser)
    return targets


def _client(role: str, person) -> Client:
    client = Client(raise_request_exception=False)
    if role == "superuser":
        client.force_login(person("root", is_staff=True, is_superuser=True))
    elif role != "anonymous":
        client.force_login(person(f"a-{role}", role, is_staff=role == "admin"))
    return client


def _status(client: Client, path: str, query: str) -> int:
    with transaction.atomic():
        response = client.get(f"{path}?{query}")
        if response.streaming:
            b"".join(response.streaming_content)
        transaction.set_rollback(True)
    return response.status_code


@pytest.fixture
def world():
    run = Run.objects.create(operation_id="op-1", thread_id="th-1", graph="support-desk")
    Handoff.objects.create(handoff_id="h-1", run=run, verdict="HEALTHY")


def test_the_walk_covers_the_pages_and_every_admin_filter(person):
    targets = _targets(person("root", is_staff=True, is_superuser=True))
    for path in ["/", "/runs/", "/map/", "/audit/", "/audit.csv", "/runs/1/history/", "/admin/", "/api/v1/receipts"]:
        assert path in targets
    assert "status__exact" in targets["/admin/receipts/delivery/"]
    assert "event" in targets["/admin/receipts/delivery/"]
    assert "kind__exact" in targets["/admin/receipts/alertrule/"]
    assert "kind__exact" in targets["/admin/receipts/notificationchannel/"]
    assert "source_name" in targets["/admin/receipts/sourcetoken/"]
    assert len(targets) > 60


@pytest.mark.parametrize("role", ROLES)
def test_no_parameter_of_any_url_is_a_5xx_for_any_role(role, person, world, monkeypatch):
    """Every parameter at once with a NUL, a lone surrogate and 1e400 (short values: one request holds them all),
    and the first alone with 10 KB. Where the view is reached, also each parameter alone with a NUL for the
    least and the most privileged role (viewer, superuser), and alone with 10 KB for the superuser, who reaches
    every view (a redirect to log in, 403 or 405 is decided before any parameter is read)."""
    monkeypatch.setattr(health, "overall", lambda: {})  # /healthz asks Redis and the workers, a second each
    targets = _targets(person("walker", is_staff=True, is_superuser=True))
    client = _client(role, person)
    failures, served = [], 0
    for path, names in targets.items():
        baseline = _status(client, path, "")
        turned_away = baseline in (302, 403, 405)
        served += not turned_away
        each = {"NUL": role in ("viewer", "superuser"), "10 KB": role == "superuser"}
        queries = [(what, "&".join(f"{quote(name)}={VALUES[what]}" for name in names)) for what in SHORT]
        for what in ("NUL", "10 KB"):
            alone = names if each[what] and not turned_away else names[:1]
            queries += [(what, f"{quote(name)}={VALUES[what]}") for name in alone]
        for what, query in queries:
            status = _status(client, path, query)
            if status >= 500:
                failures.append((path, query[:60], what, status))
            elif what == "NUL":
                assert status == 400, (path, query[:60], status)  # refused before any view, whoever asks
    assert not failures
    assert served >= (0 if role == "anonymous" else 10)  # the walk reached views, not only refusals


# --- the five admin filters and the map of the issue, and the bound ----------------------------------


@pytest.fixture
def boss(client, person):
    client.force_login(person("boss", "admin", is_staff=True))
    client.raise_request_exception = False
    return client


@pytest.mark.parametrize(
    "url",
    [
        "/admin/receipts/delivery/?status__exact=%00",
        "/admin/receipts/delivery/?event=%00",
        "/admin/receipts/alertrule/?kind__exact=%00",
        "/admin/receipts/notificationchannel/?kind__exact=%00",
        "/admin/receipts/sourcetoken/?source_name=%00",
        "/map/?team=%00",
    ],
)
def test_a_nul_in_the_issues_urls_is_refused_in_words(boss, url):
    response = boss.get(url)
    assert response.status_code == 400
    name = url.split("?")[1].split("=")[0]
    assert f"The parameter {name} holds a NUL character" in response.content.decode()


def test_the_map_refuses_a_nul_team_to_a_viewer(client, person):
    client.force_login(person("vera", "viewer"))
    client.raise_request_exception = False
    response = client.get("/map/?team=%00")
    assert response.status_code == 400 and "The parameter team holds a NUL" in response.content.decode()


def test_a_team_that_is_not_the_users_is_refused_on_every_page(boss, person, make_team):
    make_team("alpha")
    vera = Client(raise_request_exception=False)
    vera.force_login(person("vera", "viewer"))
    for path in ("/", "/runs/", "/waits/", "/map/"):
        response = vera.get(path, {"team": "alpha"})
        assert response.status_code == 400, path
        assert "The parameter team: that team is not one of yours" in response.content.decode()


def test_a_query_string_over_the_bound_is_a_414_in_words(boss):
    over = "x" * (MAX_QUERY_BYTES + 1 - len("q="))
    for path in ("/runs/", "/admin/receipts/delivery/", "/login/"):
        response = boss.get(f"{path}?q={over}")
        assert response.status_code == 414, path
        assert "The address is too long" in response.content.decode()
    assert boss.get(f"/runs/?q={over[:-1]}").status_code == 200  # at the bound: served
    api = boss.get(f"/api/v1/receipts?q={over}")
    assert api.status_code == 414 and api.json()["error"]["field"] == "query"


def test_an_htmx_request_is_told_in_the_pages_notice(boss):
    response = boss.get("/runs/?verdict=%00", headers={"HX-Request": "true"})
    assert response.status_code == 400 and response["HX-Retarget"] == "#request-notice"


# --- real daphne: a request line past what it reads is a 414, not a dropped connection -------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answer(port: int, target: bytes) -> bytes:
    """What daphne answers a GET of `target` (b"" when it closes the connection without a word)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return data


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.fixture
def daphne():
    port = _free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "sidewisp.settings", "DEBUG": "0", "SECURE_SSL_REDIRECT": "0"}
    command = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "sidewisp.asgi:application"]
    process = subprocess.Popen(command, env=env, cwd=settings.BASE_DIR)
    try:
        wait_until(lambda: _listening(port) or process.poll() is not None, what="daphne listening", timeout=30)
        assert process.poll() is None, "daphne exited while starting"
        yield port
    finally:
        process.kill()
        process.wait(10)


def test_daphne_answers_a_30_kb_query_string_414(daphne):
    answer = _answer(daphne, b"/api/v1/receipts?q=" + b"x" * 30 * 1024)
    assert answer.startswith(b"HTTP/1.1 414 ")
    assert answer.endswith(b"The address is too long: the request line is over 16 KB.\n")
    # Under the server's limit and over the app's: the middleware's 414, in words.
    middle = _answer(daphne, b"/api/v1/receipts?q=" + b"x" * 13 * 1024)
    assert middle.startswith(b"HTTP/1.1 414 ") and b"The address is too long: its query string is" in middle
    assert _answer(daphne, b"/api/v1/receipts?q=x").startswith(b"HTTP/1.1 405 ")  # a GET of a POST-only URL
