"""Finding things: search, filters and pages on every list, and the missing context keys named."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from receipts.ingest import health
from receipts.models import AuditEntry, Handoff, Run
from tests.conftest import handoff_parts
from tests.sidewisp.test_pages import bulk_handoffs, handoffs_at  # noqa: F401 - the class-scoped seed, shared

pytestmark = pytest.mark.django_db

RUNS = reverse("sidewisp:runs")


def _run(operation_id: str, **fields) -> Run:
    return Run.objects.create(operation_id=operation_id, thread_id=f"t-{operation_id}", **fields)


def _handoff(run: Run, handoff_id: str, **fields) -> Handoff:
    return Handoff.objects.create(handoff_id=handoff_id, run=run, verdict=fields.pop("verdict", "HEALTHY"), **fields)


def _listed(body: str) -> set[str]:
    section = body.split('id="runs-list"')[1].split("</section>")[0]
    return {part.split("<")[0] for part in section.split("<code>")[1:]}


# --- search -------------------------------------------------------------------------------


def test_one_search_box_finds_runs_by_part_of_a_handoff_id_an_agent_or_a_graph(viewer_client):
    by_handoff = _run("op-alpha")
    _handoff(by_handoff, "h-needle-42")
    by_agent = _run("op-beta")
    _handoff(by_agent, "h-beta", sender="triage", receiver="needle-desk")
    _run("op-gamma", graph="needlework", mode=Run.Mode.HOSTED)
    _run("op-other")
    body = viewer_client.get(RUNS, {"q": "needle"}).content.decode()
    assert _listed(body) == {"op-alpha", "op-beta", "op-gamma"}


def test_an_exact_operation_id_opens_its_run(viewer_client):
    run = _run("op-exact")
    _run("op-exact-2")
    response = viewer_client.get(RUNS, {"q": " op-exact "})
    assert response.status_code == 302
    assert response.url == reverse("sidewisp:run-detail", args=[run.pk])


def test_an_operation_id_two_sides_use_lists_both_runs(viewer_client):
    # issue 29 §4: a source's operation ids live in its own namespace; the id names no one run.
    local, remote = _run("op-shared"), _run("op-shared", source_name="billing")
    response = viewer_client.get(RUNS, {"q": "op-shared"})
    assert response.status_code == 200
    body = response.content.decode()
    assert _listed(body) == {"op-shared"}
    for run in (local, remote):
        assert reverse("sidewisp:run-detail", args=[run.pk]) in body


def test_an_exact_handoff_id_opens_its_run_at_that_handoff(viewer_client):
    run = _run("op-holder")
    handoff = _handoff(run, "h-exact")
    response = viewer_client.get(RUNS, {"q": "h-exact"})
    assert response.url == f"{reverse('sidewisp:run-detail', args=[run.pk])}#handoff-{handoff.pk}"


def test_an_exact_id_typed_into_the_htmx_filter_form_sends_the_browser_to_the_run(viewer_client):
    run = _run("op-exact")
    response = viewer_client.get(RUNS, {"q": "op-exact"}, headers={"HX-Request": "true"})
    assert response["HX-Redirect"] == reverse("sidewisp:run-detail", args=[run.pk])


def test_every_page_has_a_labelled_header_search_that_lands_on_the_runs_list(viewer_client):
    for name in ("sidewisp:overview", "sidewisp:waits", "sidewisp:false-completions", "sidewisp:system"):
        body = viewer_client.get(reverse(name)).content.decode()
        form = body.split('class="header-search"')[1].split("</form>")[0]
        assert f'action="{RUNS}"' in form and 'name="q"' in form
        assert '<label for="header-q"' in form


def test_the_login_page_has_no_header_search(client):
    assert b"header-search" not in client.get(reverse("login")).content


# --- filters ------------------------------------------------------------------------------


def test_the_runs_list_filters_by_graph(viewer_client):
    _run("op-desk", graph="support-desk", mode=Run.Mode.HOSTED)
    _run("op-coder", graph="coder", mode=Run.Mode.HOSTED)
    body = viewer_client.get(RUNS, {"graph": "coder"}).content.decode()
    assert _listed(body) == {"op-coder"}
    assert '<option value="support-desk">support-desk</option>' in body


def test_the_runs_list_filters_by_route_version(viewer_client):
    _handoff(_run("op-v1"), "h-v1", route_version="routes/1")
    _handoff(_run("op-v2"), "h-v2", route_version="routes/2")
    body = viewer_client.get(RUNS, {"route_version": "routes/2"}).content.decode()
    assert _listed(body) == {"op-v2"}


@pytest.mark.parametrize("level", [health.HEALTHY, health.IN_PROGRESS, health.WAITING, health.FAILING])
def test_the_runs_list_filters_by_run_health(viewer_client, level):
    for each in health.LEVELS:
        _run(f"op-{each}", health=each)
    body = viewer_client.get(RUNS, {"health": level}).content.decode()
    assert _listed(body) == {f"op-{level}"}


@pytest.mark.parametrize(("window", "expected"), [("15m", {"op-5m"}), ("1h", {"op-5m", "op-50m"}), ("7d", None)])
def test_the_runs_list_filters_by_time_window(viewer_client, window, expected):
    now = datetime.now(UTC)
    for name, age in (("op-5m", timedelta(minutes=5)), ("op-50m", timedelta(minutes=50)), ("op-3d", timedelta(days=3))):
        _run(name, created_at=now - age)
    _run("op-30d", created_at=now - timedelta(days=30))
    body = viewer_client.get(RUNS, {"window": window}).content.decode()
    assert _listed(body) == (expected or {"op-5m", "op-50m", "op-3d"})


def test_filters_and_search_combine_and_survive_paging(viewer_client):
    for i in range(30):
        _run(f"op-find-{i:02}", graph="coder", health=health.FAILING)
    _run("op-find-healthy", graph="coder", health=health.HEALTHY)
    query = {"q": "find", "graph": "coder", "health": "failing", "window": "24h"}
    body = viewer_client.get(RUNS, query).content.decode()
    assert "30 runs matching" in body and len(_listed(body)) == 25
    older = 'href="?q=find&amp;graph=coder&amp;health=failing&amp;window=24h&amp;older='
    assert older in body
    cursor = body.split(older)[1].split('"')[0]
    rest = viewer_client.get(RUNS, {**query, "older": cursor}).content.decode()
    assert _listed(body) | _listed(rest) == {f"op-find-{i:02}" for i in range(30)} and len(_listed(rest)) == 5


# --- every list has pages -------------------------------------------------------------------


def test_the_waits_inbox_is_paginated_and_keeps_mine_in_its_page_links(viewer_client):
    bulk_handoffs(400)  # 160 open waits, half of them the viewer's
    page1 = viewer_client.get(reverse("sidewisp:waits"), {"mine": "1"}).content.decode()
    assert '<span data-count="open-waits">80</span> open waits, 1–25 shown' in page1  # noqa: RUF001 - the page's dash
    assert 'href="?mine=1&amp;page=2"' in page1
    page4 = viewer_client.get(reverse("sidewisp:waits"), {"mine": "1", "page": "4"}).content.decode()
    assert page4.count('class="row wait') == 5 and "Page 4 of 4" in page4


def test_the_false_completions_list_is_paginated_not_cut(viewer_client):
    bulk_handoffs(400)  # 80 false completions
    body = viewer_client.get(reverse("sidewisp:false-completions"), {"page": "4"}).content.decode()
    listed = body.split('id="false-list"')[1].split("</section>")[0]
    rows = re.findall(r'id="false-\d+"', listed)
    assert "76–80 shown" in listed and len(rows) == 5  # noqa: RUF001 - the page's dash


def test_the_audit_log_is_paginated(admin_client):
    AuditEntry.objects.bulk_create(
        AuditEntry(actor_name="system", action="wait.escalate", object_type="handoff", object_id=str(i), outcome="done")
        for i in range(120)
    )
    body = admin_client.get(reverse("sidewisp:audit"), {"page": "3"}).content.decode()
    assert body.count('id="audit-') == 20 and 'rel="prev"' in body and 'rel="next"' not in body


def test_a_long_runs_handoffs_are_paginated_latest_first(viewer_client):
    run = bulk_handoffs(130, per_run=130)[0]
    url = reverse("sidewisp:run-detail", args=[run.pk])
    page1 = viewer_client.get(url).content.decode()
    assert "Handoffs 1–100 of 130" in page1 and 'href="?page=2"' in page1  # noqa: RUF001 - the page's dash
    page2 = viewer_client.get(url, {"page": "2"}).content.decode()
    assert page2.count('class="card handoff"') == 30


@pytest.fixture
def admin_client(client, person):
    client.force_login(person("root", "admin"))
    return client


# --- the missing context keys are named ---------------------------------------------------------


def test_a_context_incomplete_handoff_names_the_missing_keys(viewer_client, contracts):
    from receipts.ingest.recording import record

    parts = handoff_parts("healthy", sender="triage", receiver="sales")[:3]
    parts[1] = ("reduced", {**parts[1][1], "context_keys": ["request_type"]})
    for part, value in parts:
        handoff = record(handoff_id="h-ctx", operation_id="op-ctx", part=part, value=value).handoff
    assert handoff.verdict == "CONTEXT_INCOMPLETE"
    body = viewer_client.get(reverse("sidewisp:run-detail", args=[handoff.run_id])).content.decode()
    assert "lacks 2 of the keys" in body
    assert "missing: <code>customer_tier</code>, <code>consent_status</code>" in body


# --- query counts stay flat ---------------------------------------------------------------------


@pytest.mark.parametrize("handoffs_at", [10, 5_000], indirect=True)
@pytest.mark.usefixtures("handoffs_at")
class TestSearchingKeepsAFixedNumberOfQueries:
    """Searching, filtering and paging over 10 and then 5,000 handoffs (1 and 500 runs), seeded once per size
    (test_pages.handoffs_at): seeding 5,000 handoffs for each of the four requests took most of a minute each."""

    @pytest.mark.parametrize(
        ("name", "params", "most"),
        [
            (
                "sidewisp:runs",
                {"q": "op", "graph": "coder", "route_version": "routes/1", "health": "failing", "window": "7d"},
                8,  # as test_pages.MAX_QUERIES["sidewisp:runs"]
            ),
            ("sidewisp:runs", {"q": "p-3"}, 9),  # + the exact-match lookup
            ("sidewisp:waits", {"page": "2"}, 8),
            ("sidewisp:false-completions", {"page": "2"}, 8),
        ],
    )
    def test_searching_filtering_and_paging_keep_a_fixed_number_of_queries(
        self, viewer_client, django_assert_max_num_queries, name, params, most
    ):
        with django_assert_max_num_queries(most):
            response = viewer_client.get(reverse(name), params)
        assert response.status_code == 200
