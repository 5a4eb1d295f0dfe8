"""Starting a hosted run from the dashboard: operators and admins only, validated, audited without the input."""

from __future__ import annotations

import json
import uuid

import pytest
from django.urls import reverse

from receipts.models import AuditEntry, Run

pytestmark = pytest.mark.usefixtures("fake_runtime")

PROMPT = "please refund order 1234 for jane@example.com"


def key() -> str:
    return uuid.uuid4().hex


def start(client, **fields):
    data = {"graph": "support-desk", "graph_input": json.dumps({"messages": [PROMPT], "priority": 2}), "key": key()}
    return client.post(reverse("sidewisp:run-create"), {**data, **fields})


@pytest.fixture
def olga(client, person):
    client.force_login(person("olga", "operator"))
    return client


def test_the_start_page_offers_the_registered_graphs_with_labelled_fields(olga):
    body = olga.get(reverse("sidewisp:run-start")).content.decode()

    assert '<option value="support-desk">support-desk</option>' in body
    for name in ("graph", "graph_input", "operation_id"):
        assert f'<label for="id_{name}">' in body
    assert 'name="key"' in body


def test_an_operator_starts_a_queued_hosted_run(olga, fake_runtime, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = start(olga, operation_id="ticket-77")

    run = Run.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("sidewisp:run-detail", args=[run.pk])
    assert (run.operation_id, run.mode, run.graph, run.status) == ("ticket-77", "hosted", "support-desk", "queued")
    assert run.input == {"messages": [PROMPT], "priority": 2}
    assert fake_runtime.started == [run.pk]


def test_the_audit_entry_names_the_graph_and_the_input_keys_but_never_the_values(olga):
    start(olga)

    entry = AuditEntry.objects.get()
    run = Run.objects.get()
    assert (entry.action, entry.outcome, entry.actor_name, entry.run) == ("run.start", "done", "olga", run)
    assert entry.detail["graph"] == "support-desk"
    assert entry.detail["input_keys"] == ["messages", "priority"]
    assert PROMPT not in json.dumps(entry.detail) and "jane@example.com" not in entry.reason


def test_the_new_runs_page_says_the_run_is_queued_and_never_shows_the_input(olga):
    body = olga.post(
        reverse("sidewisp:run-create"),
        {"graph": "support-desk", "graph_input": json.dumps({"q": PROMPT}), "key": key(), "operation_id": "t-78"},
        follow=True,
    ).content.decode()

    assert "Run t-78 is queued" in body
    assert "Hosted · graph support-desk" in body
    assert PROMPT not in body


def test_a_viewer_is_refused_the_start_and_the_attempt_is_audited(client, person):
    client.force_login(person("vic", "viewer"))

    page = client.get(reverse("sidewisp:run-start"))
    response = start(client)

    assert (page.status_code, response.status_code) == (403, 403)
    assert not Run.objects.exists()
    # Opening the form is not an attempt (not audited); the refused POST is.
    assert list(AuditEntry.objects.values_list("action", "outcome", "actor_name")) == [
        ("run.start", "denied", "vic"),
    ]


def test_an_anonymous_post_is_refused(client, db):
    assert start(client).status_code == 403
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ('{"messages": [}', "The input is not valid JSON: Expecting value at line 1, column 15."),
        ('["a", "b"]', "The input must be a JSON object ({…}), not a list."),
        ('"just text"', "The input must be a JSON object ({…}), not a string."),
        ('{"n": NaN}', "The input is not valid JSON: NaN is not a JSON number."),
        ('{"x": "' + "a" * 20_001 + '"}', "The input is 20,010 bytes; at most 20 kB (20,000 bytes)."),
    ],
)
def test_an_input_that_is_not_a_small_json_object_is_a_form_error(olga, raw, error):
    response = start(olga, graph_input=raw)

    assert response.status_code == 400
    assert error in response.content.decode()
    assert not Run.objects.exists()


def test_an_unknown_graph_is_a_form_error(olga):
    response = start(olga, graph="no-such-graph")

    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("operation_id", "error"),
    [
        ("../../etc/passwd", "must not be a path"),
        ("C:\\runs\\1", "must not be a path"),
        ("~root", "must not be a path"),
        ("op\u202e1", "must not contain control characters"),
        ("x" * 201, "at most 200 characters"),
    ],
)
def test_an_operation_id_that_is_a_path_or_hides_characters_is_a_form_error(olga, operation_id, error):
    response = start(olga, operation_id=operation_id)

    assert response.status_code == 400
    assert error in response.content.decode()
    assert not Run.objects.exists()


def test_an_operation_id_in_use_is_a_form_error_and_nothing_is_created(olga):
    Run.objects.create(operation_id="ticket-77", thread_id="th-existing")

    response = start(olga, operation_id="ticket-77")

    assert response.status_code == 409
    assert "A run with operation id &#x27;ticket-77&#x27; exists already" in response.content.decode()
    assert Run.objects.count() == 1
    assert AuditEntry.objects.get().outcome == "refused"


def test_submitting_the_same_form_twice_starts_one_run(olga):
    same = key()

    first = start(olga, key=same)
    second = start(olga, key=same)

    run = Run.objects.get()
    assert first["Location"] == second["Location"] == reverse("sidewisp:run-detail", args=[run.pk])
    assert list(AuditEntry.objects.order_by("pk").values_list("outcome", flat=True)) == ["done", "noop"]


def test_the_runs_page_offers_the_start_only_to_those_who_may_start(client, person):
    link = reverse("sidewisp:run-start")
    client.force_login(person("vic", "viewer"))
    as_viewer = client.get(reverse("sidewisp:runs")).content.decode()
    client.force_login(person("olga", "operator"))
    as_operator = client.get(reverse("sidewisp:runs")).content.decode()

    assert link not in as_viewer
    assert link in as_operator


def test_with_no_registered_graph_the_page_says_there_is_nothing_to_start(olga, fake_runtime):
    fake_runtime.graph_names = []

    body = olga.get(reverse("sidewisp:run-start")).content.decode()

    assert "No graph is registered" in body
    assert reverse("sidewisp:run-create") not in body


def test_the_action_itself_refuses_an_operation_id_that_is_not_valid_as_such_not_as_taken(person):
    # The form refuses such ids first; a caller of the action (a command, the API) must get the same truth.
    from receipts import actions

    result = actions.start_run(
        user=person("olga", "operator"), graph="support-desk", graph_input={}, key=key(), operation_id="/etc/passwd"
    )

    assert result.outcome == "refused"
    assert "not valid" in result.message and "exists already" not in result.message
    assert "/etc/passwd" not in result.message
    assert not Run.objects.exists()


def test_the_start_page_says_which_graphs_this_web_process_knows_and_that_workers_may_differ(olga, settings):
    settings.SIDEWISP_GRAPHS = ""
    default = olga.get(reverse("sidewisp:run-start")).content.decode()
    settings.SIDEWISP_GRAPHS = json.dumps({"support-desk": "tests/agents/hosted_graph.py:make_graph"})
    configured = olga.get(reverse("sidewisp:run-start")).content.decode()

    # The names this page offers (the fake runtime's), where they come from, and that workers may know others.
    assert "This web process knows 2 graphs: support-desk, coder" in default
    assert "SIDEWISP_GRAPHS is not set here: the default graphs" in default
    assert "from its SIDEWISP_GRAPHS" in configured
    assert "not set here" not in configured
    for page in (default, configured):
        assert "Workers run the graphs of their own SIDEWISP_GRAPHS" in page
