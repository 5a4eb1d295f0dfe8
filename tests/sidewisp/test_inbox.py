"""The waits inbox (issue 30 §3, §7): each wait's tool and argument names, words where nothing is offered, a
remote app's wait carrying its call's names, and deciding several waits of one tool at once."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from django.urls import reverse

from receipts import actions
from receipts.models import AuditEntry, Decision, Run
from receipts.workers import sources
from tests.conftest import handoff_parts

pytestmark = pytest.mark.usefixtures("fake_runtime")


def waits_of(scenario_handoff, n: int, owner: str = "ops-lead") -> list:
    """Open waits on hosted runs of a graph the fake runtime drives (its pending call: place_order)."""
    found = [scenario_handoff("waiting", scenario="waiting_on_approval", owner=owner) for _ in range(n)]
    Run.objects.filter(pk__in=[h.run_id for h in found]).update(graph="support-desk")
    for h in found:
        h.run.refresh_from_db()
    return found


def test_the_inbox_shows_each_waits_tool_and_argument_names_never_values(client, owner, scenario_handoff):
    (wait,) = waits_of(scenario_handoff, 1)
    client.force_login(owner)

    body = client.get(reverse("sidewisp:waits")).content.decode()

    row = body[body.index(f'id="wait-{wait.pk}"') :]
    row = row[: row.index("</li>")]
    assert re.search(r"tool <code data-tool>place_order</code> with <code data-arg-key>quantity</code>", row)
    assert "<code data-arg-key>sku</code>" in row and "owner: <strong>ops-lead</strong>" in row
    assert 'class="countdown' in row and "data-waited" in row  # its deadline, and how long it has waited
    assert f'id="pick-{wait.pk}"' in row  # the owner may pick it for a batch


def test_the_inbox_lists_the_call_a_run_stored_without_asking_the_runtime(
    client, owner, scenario_handoff, fake_runtime, monkeypatch
):
    # A hosted run's writer stores its wait's call names with the run (Run.pending_call): the list reads those,
    # not the checkpoint (the runtime builds the run's graph to read one: most of the page's time at 25 waits).
    (wait,) = waits_of(scenario_handoff, 1)
    stored = {
        "tool": "refund_order",
        "arg_types": {"order_id": "str"},
        "allowed_decisions": ["approve", "reject"],
        "resume_token_id": wait.wait_part["resume_token_id"],
        "interrupts": [{"id": "i-1", "calls": 1}],
    }
    Run.objects.filter(pk=wait.run_id).update(pending_call=stored)
    asked = []
    monkeypatch.setattr(fake_runtime, "pending_call", lambda run: asked.append(run.pk))
    client.force_login(owner)

    body = client.get(reverse("sidewisp:waits")).content.decode()

    row = body[body.index(f'id="wait-{wait.pk}"') :]
    row = row[: row.index("</li>")]
    assert re.search(r"tool <code data-tool>refund_order</code> with <code data-arg-key>order_id</code>", row)
    assert asked == []


def test_a_wait_nobody_here_may_act_on_says_why_and_who_can(client, person, scenario_handoff):
    (wait,) = waits_of(scenario_handoff, 1)
    client.force_login(person("watcher", "viewer"))

    body = client.get(reverse("sidewisp:waits")).content.decode()

    row = body[body.index(f'id="wait-{wait.pk}"') :]
    row = row[: row.index("</li>")]
    assert 'data-action="' not in row and f'id="pick-{wait.pk}"' not in row
    assert "Your role does not decide waits. Deciding this wait needs its owner (ops-lead)" in row
    other = person("approver-2", "approver")
    client.force_login(other)
    row = client.get(reverse("sidewisp:waits")).content.decode()
    assert "You are not its owner. Deciding this wait needs its owner (ops-lead) or the approve-any-wait" in row


def test_a_remote_apps_wait_carries_its_tool_and_argument_names(client, owner, db, contracts, settings):
    _row, secret = sources.issue("far-app")
    entries = [
        {"kind": "part", "operation_id": "op-far", "handoff_id": "h-far", "part": part, "value": value, "attempt": "1"}
        for part, value in handoff_parts("waiting")
    ]
    entries[3]["value"] = {**entries[3]["value"], "owner": "ops-lead"}
    call = {
        "tool": "refund_order",
        "arg_types": {"order_id": "str", "amount": "float"},
        "allowed_decisions": ["approve", "reject"],
        "resume_token_id": "token-55d0",
        "interrupts": [{"id": "i-1", "calls": 1}],
        "arg_values": {"order_id": "secret-order-991"},  # not a field: dropped, never stored
    }
    entries.append({"kind": "pending", "operation_id": "op-far", "pending_call": call})
    posted = client.post(
        "/api/v1/receipts",
        json.dumps({"entries": entries}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert posted.status_code == 200, posted.content

    run = Run.objects.get(operation_id="op-far", source_name="far-app")
    assert run.pending_call["tool"] == "refund_order" and "arg_values" not in run.pending_call
    offered = json.dumps(run.pending_call)
    assert "secret-order-991" not in offered


def test_a_remote_pending_call_that_is_not_names_is_refused_naming_the_field(client, db, contracts):
    _row, secret = sources.issue("far-app")
    call = {"tool": "refund_order", "arg_types": {"/home/me/x": "str"}, "resume_token_id": "t-1"}
    posted = client.post(
        "/api/v1/receipts",
        json.dumps({"entries": [{"kind": "pending", "operation_id": "op-x", "pending_call": call}]}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert posted.status_code == 400
    assert posted.json()["error"]["field"] == "entries[0].pending_call.arg_types"
    assert not Run.objects.filter(operation_id="op-x").exists()


def _confirm(client, waits, kind="approve"):
    query = "&".join(f"wait={w.pk}" for w in waits)
    return client.get(f"{reverse('sidewisp:waits-batch')}?decision={kind}&{query}")


def _signed(page: str) -> str:
    return re.search(r'name="batch" value="([^"]+)"', page).group(1)


def test_a_batch_decides_each_wait_once_and_names_the_one_reassigned_meanwhile(client, owner, person, scenario_handoff):
    waits = waits_of(scenario_handoff, 4)
    client.force_login(owner)
    page = _confirm(client, waits).content.decode()
    assert page.count("data-batch-item=") == 4 and page.count('data-arg="') == 0  # names only (fake runtime)
    # Meanwhile an operator gives the last wait to someone else.
    person("approver-2", "approver")
    moved = actions.reassign(
        user=person("oncall", "operator"),
        handoff_id=waits[3].pk,
        owner="approver-2",
        deadline_minutes=60,
        key=uuid.uuid4().hex,
    )
    assert moved.ok, moved.message
    data = {"batch": _signed(page), "key": uuid.uuid4().hex, "reason": ""}

    done = client.post(reverse("sidewisp:waits-batch-decide"), data)
    again = client.post(reverse("sidewisp:waits-batch-decide"), data)

    body = done.content.decode()
    assert done.status_code == 200
    assert body.count("data-applied=") == 3
    assert f'data-left-out="{waits[3].pk}"' in body and "reassigned to approver-2 meanwhile" in body
    assert Decision.objects.filter(kind="approve").count() == 3
    assert set(Decision.objects.values_list("handoff_id", flat=True)) == {w.pk for w in waits[:3]}
    entries = AuditEntry.objects.filter(action="wait.approve")
    assert entries.filter(outcome="done").count() == 3
    assert entries.filter(outcome="denied", handoff_id=waits[3].pk).count() == 2  # each POST checks and audits it
    # A re-POST decides nothing again: each is named as already decided.
    assert again.status_code == 200 and again.content.decode().count("data-repeated=") == 3
    assert Decision.objects.count() == 3


def test_a_wait_the_user_may_not_decide_is_left_out_of_the_batch_and_a_forged_batch_is_refused(
    client, owner, scenario_handoff
):
    mine = waits_of(scenario_handoff, 1)
    theirs = waits_of(scenario_handoff, 1, owner="approver-2")
    client.force_login(owner)

    page = _confirm(client, mine + theirs).content.decode()

    assert page.count("data-batch-item=") == 1
    assert f'data-left-out="{theirs[0].pk}"' in page and "needs its owner (approver-2)" in page
    signed = _signed(page)
    forged = signed.replace(signed[:8], "eyJraW5k", 1) if not signed.startswith("eyJraW5k") else signed[::-1]
    refused = client.post(reverse("sidewisp:waits-batch-decide"), {"batch": forged, "key": uuid.uuid4().hex})
    assert refused.status_code == 400 and not Decision.objects.exists()


def test_a_batch_request_that_names_no_waits_is_a_clear_error(client, owner):
    client.force_login(owner)
    assert (
        "Select at least one wait" in client.get(reverse("sidewisp:waits-batch") + "?decision=approve").content.decode()
    )
    bad = client.get(reverse("sidewisp:waits-batch") + "?decision=approve&wait=abc")
    assert bad.status_code == 400 and "whole number" in bad.content.decode()
