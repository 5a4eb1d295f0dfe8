"""What a page says when something is down or refused, in a real Chromium (issue 19 §2).

- The live indicator: "Live updates paused" while the server's Redis is down (its socket stays open),
  "Connected" once Redis is back.
- A refused htmx request (a filter with a NUL): its words above the page, the list and the URL kept; the
  next request that succeeds clears them.

The server is daphne with every Redis use (channel layer, cache, broker) on a private redis-server that the
test kills and starts again on the same port (tests/faults' PrivateRedis); the shared Redis is not touched.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.e2e.test_live_pages import (
    LIVE_TIMEOUT_MS,
    PASSWORD,
    Server,
    expect,
    in_db_thread,
    log_in,
    shoot,
    wait_live,
)
from tests.faults.conftest import PrivateRedis

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def server(transactional_db, celery_isolation, tmp_path) -> Iterator[Server]:
    """daphne on the test database and on a Redis of this test's own (`server.redis`)."""
    from sidewisp.ops.devservices import _free_port

    def _setup():
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Permission

        user = get_user_model().objects.create_user(username="viewer", password=PASSWORD)
        user.user_permissions.add(Permission.objects.get(codename="view_dashboard", content_type__app_label="receipts"))

    in_db_thread(_setup)
    redis = PrivateRedis(port=_free_port(), data_dir=tmp_path / "redis")
    redis.data_dir.mkdir()
    redis.start()
    live = Server(celery_isolation)
    live.env["REDIS_URL"] = redis.url
    live.redis = redis
    live.start()
    try:
        yield live
    finally:
        live.stop()
        redis.kill()


def test_the_indicator_says_paused_while_redis_is_down_and_connected_once_it_is_back(page, server):
    log_in(page, server)
    wait_live(page)
    status = page.locator("#live-status")

    server.redis.kill()

    expect(status).to_have_attribute("data-state", "paused", timeout=LIVE_TIMEOUT_MS)
    expect(status).to_contain_text("Live updates paused: the event channel is not answering.")
    shoot(page, "live-paused")

    server.redis.start()

    expect(status).to_have_attribute("data-state", "open", timeout=3 * LIVE_TIMEOUT_MS)
    expect(status).to_have_text(re.compile(r"Connected$"))


def test_a_refused_filter_shows_its_words_above_the_list_and_a_later_search_clears_them(page, server):
    log_in(page, server)
    page.goto(f"{server.url}/runs/")
    wait_live(page)
    notice = page.locator("#request-notice")

    # What the search form sends, with a NUL no keyboard types (htmx, as the form's hx-get does).
    page.evaluate("htmx.ajax('GET', '/runs/?q=%00', {target: '#runs-live', swap: 'outerHTML'})")

    expect(notice.locator("[data-notice=refused]")).to_contain_text("The parameter q holds a NUL character")
    expect(page.locator("#runs-live")).to_be_visible()  # the list is still there, not replaced by the words
    assert page.url == f"{server.url}/runs/"

    page.evaluate("htmx.ajax('GET', '/runs/?q=nothing-like-it', {target: '#runs-live', swap: 'outerHTML'})")

    expect(notice).to_be_empty()
    expect(page.locator("#runs-live")).to_contain_text("No runs match")
