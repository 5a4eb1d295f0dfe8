"""One vocabulary (issue 30 §4): a verdict reads the same on the run page, in the alert-rule form, in the audit
CSV and in a notification, and every verdict badge links to its glossary entry."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.urls import reverse

from receipts.models import AlertRule, Delivery, NotificationChannel
from receipts.notify import notifications
from receipts.org import audit
from receipts.verdicts import NEXT_MOVES, words
from sidewisp.pages import glossary, labels


@pytest.fixture
def admin_(person):
    return person("alex", "admin", is_staff=True)


@pytest.fixture
def channel(db):
    return NotificationChannel.objects.create(
        name="ops", kind=NotificationChannel.Kind.WEBHOOK, url="http://127.0.0.1:9/hook", secret="s3cret-for-tests"
    )


def test_every_verdict_has_one_set_of_words_that_the_pages_read():
    assert set(words.VERDICT_WORDS) == set(NEXT_MOVES)
    assert {code: label for code, (_, label, _) in labels.VERDICTS.items()} == words.VERDICT_WORDS


def test_the_glossary_explains_every_verdict_with_its_boundary_next_move_and_example(client, person):
    client.force_login(person("watcher", "viewer"))

    page = client.get(reverse("sidewisp:glossary")).content.decode()

    for code, text in words.VERDICT_WORDS.items():
        entry = re.search(rf'<div class="glossary-entry" id="{glossary.anchor(code)}".*?</div>', page, re.S)
        assert entry is not None, code
        assert text in entry.group(0) and NEXT_MOVES[code] in entry.group(0) and "Example:" in entry.group(0)


def test_a_false_complete_reads_the_same_on_the_run_page_alert_form_csv_and_notification(
    client, person, admin_, channel, record_handoff
):
    said = words.VERDICT_WORDS["FALSE_COMPLETE"]
    AlertRule.objects.create(name="false completions", kind="verdict", verdict="FALSE_COMPLETE", channel=channel)
    handoff = record_handoff("h-1", "op-1", "false_complete")
    audit.log(
        actor=None, action="task.reopen", object_type="handoff", object_id=handoff.pk, outcome="done", handoff=handoff
    )
    client.force_login(admin_)

    run_page = client.get(reverse("sidewisp:run-detail", args=[handoff.run_id])).content.decode()
    form = client.get(reverse("admin:receipts_alertrule_add")).content.decode()
    rows = list(
        csv.DictReader(io.StringIO(b"".join(client.get(reverse("sidewisp:audit-csv")).streaming_content).decode()))
    )
    message = notifications.summary(Delivery.objects.get().payload)

    badge = f'<a class="verdict-link" href="{reverse("sidewisp:glossary")}#verdict-false-complete">'
    assert badge in run_page and f"</span> {said}</span></a>" in run_page
    assert f'<option value="FALSE_COMPLETE">{said}</option>' in form
    assert rows[0]["verdict"] == "FALSE_COMPLETE" and rows[0]["verdict_words"] == said
    assert f"{said} handoffs" in message and "FALSE_COMPLETE" not in message


def test_the_alert_rule_form_offers_verdicts_by_name_and_never_healthy(client, admin_, channel):
    client.force_login(admin_)

    form = client.get(reverse("admin:receipts_alertrule_add")).content.decode()
    select = re.search(r'<select name="verdict".*?</select>', form, re.S).group(0)
    posted = client.post(
        reverse("admin:receipts_alertrule_add"),
        {
            "name": "all good",
            "kind": "verdict",
            "verdict": "HEALTHY",
            "threshold": "0",
            "window_minutes": "10",
            "channel": str(channel.pk),
            "cooldown_minutes": "15",
            "active": "on",
        },
    )

    offered = re.findall(r'<option value="([A-Z_]+)">([^<]+)</option>', select)
    assert offered == [(code, text) for code, text in words.VERDICT_WORDS.items() if code != "HEALTHY"]
    assert posted.status_code == 200 and "Select a valid choice" in posted.content.decode()
    assert not AlertRule.objects.exists()
