"""The limits form in words (issue 30 §5): every setting has a human label and help text, never its raw key, and
an invalid form opens with a summary naming each field to correct."""

from __future__ import annotations

import re

from agents.limits import wording
from agents.limits.setting import schema
from tests.agents.test_admin_limits_form import SETTINGS_URL, _post, alex, oona, world

__all__ = ["alex", "oona", "world"]


def test_every_setting_has_a_label_and_help_text_of_its_own():
    settings = schema()

    assert sorted(wording.WORDS) == sorted(s.path for s in settings)
    assert len({wording.label(s) for s in settings}) == len(settings)  # no two fields read alike
    assert all(wording.help_text(s) for s in settings)
    assert {s.section for s in settings} <= set(wording.SECTIONS)


def test_the_settings_form_shows_labels_and_help_not_keys(client, alex):
    client.force_login(alex)

    page = client.get(SETTINGS_URL, {"scope": "default"}).content.decode()

    assert '<label for="id_tool_call_limit__run_limit">Tool calls per run:</label>' in page
    assert "The most tool calls in one run of the agent. A whole number. Empty: no limit." in page
    assert "<h2>Retrying a failed tool call</h2>" in page
    assert not re.search(r"<label[^>]*>(run_limit|thread_limit|max_retries):?</label>", page)


def test_an_invalid_form_opens_with_a_summary_linking_each_field_to_correct(client, alex):
    client.force_login(alex)

    response = _post(client, "agents.sales", tool_call_limit__run_limit="ten", tool_retry__max_retries="many")

    page = response.content.decode()
    summary = page.split('id="error-summary"', 1)[1].split("</div>", 1)[0]
    assert response.status_code == 400
    assert "2 fields to correct" in summary
    assert '<a href="#id_tool_call_limit__run_limit">Tool calls per run</a>: Enter a whole number.' in summary
    assert '<a href="#id_tool_retry__max_retries">Tool retries</a>: Enter a whole number.' in summary


def test_a_documents_path_reads_as_a_place_in_words():
    settings = schema()

    assert wording.place("default.approval.deadline_minutes", settings) == (
        "Every agent (the default) · Approval deadline (minutes)"
    )
    assert wording.place("agents.billing.per_tool_limits.refund.run_limit", settings) == (
        "Agent billing · Limit per tool, refund, run limit"
    )
    assert wording.place("agents.billing.summarization", settings) == "Agent billing · Summarizing a long history"
