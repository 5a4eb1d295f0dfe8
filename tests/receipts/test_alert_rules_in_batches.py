"""A recording batch matches its changes against the verdict alert rules as stored when it began (issue 32 §2):
read with its first statements, so an admin's change is seen by the next batch and no cache is asked."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from receipts.ingest import intake
from receipts.ingest.intake import PartEntry
from receipts.models import AlertRule, Delivery, NotificationChannel
from receipts.notify import alerts
from tests.conftest import handoff_parts

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="the rules come with PostgreSQL's reads")


@pytest.fixture
def channel(db):
    return NotificationChannel.objects.create(
        name="ops", kind=NotificationChannel.Kind.WEBHOOK, url="http://127.0.0.1:9/hook", secret="s3cret-for-tests"
    )


@pytest.fixture
def billing_rule(channel):
    return AlertRule.objects.create(
        name="false completions", kind="verdict", verdict="FALSE_COMPLETE", agent="billing", channel=channel
    )


def record_false_completion(n: int) -> None:
    """One batch: a handoff from triage to sales that claims completion its verification failed."""
    entries = [PartEntry(f"op-{n}", f"h-{n}", part, value) for part, value in handoff_parts("false_complete")]
    with transaction.atomic():
        assert intake.apply(entries) == [True] * len(entries)


def test_an_admins_change_of_a_rule_is_matched_by_the_next_batch(contracts, billing_rule):
    record_false_completion(1)
    assert not Delivery.objects.exists()  # the rule watches billing; the handoff went to sales

    billing_rule.agent = ""  # as the admin saves it
    billing_rule.save()
    record_false_completion(2)

    assert Delivery.objects.get().payload["handoff_id"] == "h-2"


def test_a_rule_changed_where_no_signal_tells_this_process_is_matched_by_the_next_batch(contracts, billing_rule):
    record_false_completion(1)
    alerts.verdict_rules()  # this process's cache holds the rule as it was

    AlertRule.objects.filter(pk=billing_rule.pk).update(agent="")  # another process, or SQL: no signal here
    record_false_completion(2)

    assert Delivery.objects.get().payload["handoff_id"] == "h-2"


class AskedCache:
    """A cache that notes what it is asked and knows nothing."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def get(self, key, default=None):
        self.asked.append(key)
        return default

    def add(self, key, value, timeout=None) -> bool:
        self.asked.append(key)
        return True


def test_a_batch_asks_the_cache_nothing_for_the_rules(contracts, billing_rule, monkeypatch):
    cache = AskedCache()
    monkeypatch.setattr(alerts, "cache", cache)
    AlertRule.objects.filter(pk=billing_rule.pk).update(agent="")

    record_false_completion(1)

    assert Delivery.objects.get().payload["handoff_id"] == "h-1"
    assert cache.asked == []
