"""The live operator pages in a real headless Chromium against the real ASGI app (daphne).

The server is a daphne subprocess on the test database, so these tests commit
(transactional) and record receipts through the real recording service; its
events go through the real Redis channel layer to the server's consumer.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections
from playwright import sync_api as playwright_sync

from tests.conftest import database_url_for_subprocess, handoff_parts, subprocess_environ

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(settings.BASE_DIR) / "test-artifacts"
PASSWORD = "pw-for-e2e-tests-only-1"
LIVE_TIMEOUT_MS = 10_000

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
]

expect = playwright_sync.expect


# --- the database, from a thread without an event loop ----------------------------
# Playwright's sync API runs an asyncio loop in the test's thread; Django's ORM
# and async_to_sync (used to publish events) refuse to run there.

# Shared by every e2e module (they import in_db_thread), so no module shuts it down; it ends with the process.
_db_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="e2e-db")


def in_db_thread(fn: Callable, *args, **kwargs):
    def call():
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return _db_thread.submit(call).result()


def record_parts(handoff_id: str, operation_id: str, parts: list, attempt: str = "1") -> int:
    from receipts.ingest.recording import record

    def _record():
        result = None
        for part, value in parts:
            result = record(handoff_id=handoff_id, operation_id=operation_id, part=part, value=value, attempt=attempt)
        return result.handoff.pk

    return in_db_thread(_record)


def settle_handoff(handoff_id: str, operation_id: str) -> None:
    """A settle entry for the handoff, as the evidence writer applies one (spec v1.2 Settled)."""
    from django.db import transaction

    from receipts.ingest import intake

    def _settle():
        with transaction.atomic():
            intake.apply([intake.SettleEntry(operation_id, handoff_id)])

    in_db_thread(_settle)


def run_of(handoff_pk: int) -> int:
    from receipts.models import Handoff

    return in_db_thread(lambda: Handoff.objects.values_list("run_id", flat=True).get(pk=handoff_pk))


# --- the server --------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """daphne serving sidewisp.asgi on the test database; stop() and start() it at will."""

    def __init__(self, channel_prefix: str) -> None:
        self.port = _free_port()
        self.url = f"http://localhost:{self.port}"
        self.process: subprocess.Popen | None = None
        self.env = {
            **subprocess_environ(),
            "DATABASE_URL": database_url_for_subprocess(),
            # The same channel-layer prefix as this test run: its events reach the server.
            "SIDEWISP_QUEUE": channel_prefix,
            "DJANGO_SETTINGS_MODULE": "sidewisp.settings",
            "DEBUG": "0",
            "SECURE_SSL_REDIRECT": "0",
            "SIDEWISP_SERVE_STATIC": "1",
            "SIDEWISP_WORKER_PING_TIMEOUT": "0.2",
            "LOG_LEVEL": "WARNING",
        }

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start daphne and wait until it answers; nothing to do while it runs."""
        if self.running():
            return
        daphne = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "sidewisp.asgi:application"]
        self.process = subprocess.Popen(daphne, env=self.env, cwd=settings.BASE_DIR)
        deadline = time.monotonic() + 60  # daphne's start-up: seconds unloaded, more on a busy two-core machine
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/login/", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("daphne exited while starting") from None
                time.sleep(0.1)  # polling for the port, not waiting on a condition we could observe
        self.stop()  # never leave a daphne behind that did not answer
        raise RuntimeError("daphne did not answer within 60 s")

    def stop(self) -> None:
        if self.running():
            self.process.kill()  # like a crash: the browser sees an abnormal close (1006)
            self.process.wait(10)


def seed_viewer_and_outsider() -> None:
    """The demo contracts, `viewer` (the viewer permission) and `outsider` (logged in, nothing more)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    from agents.demo.contracts import install_team_contracts

    install_team_contracts()
    user = get_user_model().objects.create_user(username="viewer", password=PASSWORD)
    user.user_permissions.add(Permission.objects.get(codename="view_dashboard", content_type__app_label="receipts"))
    get_user_model().objects.create_user(username="outsider", password=PASSWORD)


def log_in(page, server: Server, username: str = "viewer") -> None:
    page.goto(f"{server.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Overview")


def wait_live(page) -> None:
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open", timeout=LIVE_TIMEOUT_MS)


def wait_snapshot(page) -> None:
    """The socket is open and its first message, the snapshot that replaces the server-rendered lists, is in."""
    wait_live(page)
    expect(page.locator("#ws-seq")).to_have_attribute("data-marker", re.compile('"snapshot"'), timeout=LIVE_TIMEOUT_MS)


def shoot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def csp_errors(page) -> list[str]:
    return [e for e in page.console_errors if "Content Security Policy" in e]


# --- tests -----------------------------------------------------------------------


def test_a_new_handoff_appears_and_reaches_its_verdict_without_reload(page, server):
    log_in(page, server)
    wait_live(page)
    page.evaluate("window.sidewispNoReload = true")
    parts = handoff_parts("healthy")
    pk = record_parts("h-e2e-live", "op-e2e-live", parts[:1])  # created only: control is not proven yet
    row = page.locator(f"#newest-{pk}")
    expect(row).to_contain_text("h-e2e-live", timeout=LIVE_TIMEOUT_MS)
    expect(row).to_contain_text("In progress — waiting for the reduced receipt")
    settle_handoff("h-e2e-live", "op-e2e-live")  # its step ended without the reduced receipt: a verdict now
    expect(row).to_contain_text("Stale control", timeout=LIVE_TIMEOUT_MS)
    record_parts("h-e2e-live", "op-e2e-live", parts[1:])
    expect(row).to_contain_text("Healthy", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("[data-count=HEALTHY]")).to_have_text("1")
    assert page.evaluate("window.sidewispNoReload") is True
    shoot(page, "overview")
    assert csp_errors(page) == []


def test_the_run_page_converges_after_its_socket_drops(page, server):
    parts = handoff_parts("waiting")
    pk = record_parts("h-e2e-drop", "op-e2e-drop", parts)
    run_id = run_of(pk)
    log_in(page, server)
    page.goto(f"{server.url}/runs/{run_id}/")
    wait_live(page)
    card = page.locator(f"#handoff-{pk}")
    expect(card).to_contain_text("Waiting on approval")

    server.stop()
    expect(page.locator("#live-status")).to_have_attribute("data-state", "closed", timeout=LIVE_TIMEOUT_MS)
    # Recorded while the page has no socket: its event reaches nobody.
    record_parts("h-e2e-drop", "op-e2e-drop", [("final_status", "complete")], attempt="2")
    server.start()

    expect(card).to_contain_text("False complete", timeout=LIVE_TIMEOUT_MS)
    expect(card).to_contain_text("reopen the task; do not trust the final message")
    wait_live(page)
    shoot(page, "run-detail")


def test_a_filtered_runs_list_stays_filtered_while_it_updates_live(page, server):
    record_parts("h-e2e-ok", "op-e2e-ok", handoff_parts("healthy"))
    record_parts("h-e2e-false", "op-e2e-false", handoff_parts("false_complete"))
    log_in(page, server)
    page.goto(f"{server.url}/runs/")
    wait_live(page)
    page.select_option("#id_verdict", "FALSE_COMPLETE")
    page.click("form.filters button[type=submit]")
    runs = page.locator("#runs-list")
    expect(runs).not_to_contain_text("op-e2e-ok")
    assert "verdict=FALSE_COMPLETE" in page.url
    wait_live(page)
    record_parts("h-e2e-ok2", "op-e2e-ok2", handoff_parts("healthy"))
    record_parts("h-e2e-false2", "op-e2e-false2", handoff_parts("false_complete"))
    expect(runs).to_contain_text("op-e2e-false2", timeout=LIVE_TIMEOUT_MS)
    expect(runs).not_to_contain_text("op-e2e-ok")
    shoot(page, "runs-filtered-live")


def test_the_runs_list_inserts_a_new_run_as_its_row_and_leaves_the_others(page, server):
    older = run_of(record_parts("h-e2e-older", "op-e2e-older", handoff_parts("healthy")))
    log_in(page, server)
    page.goto(f"{server.url}/runs/")
    wait_snapshot(page)  # marked after the snapshot: it replaces the server-rendered rows, as it should
    page.evaluate(f"document.getElementById('run-row-{older}').dataset.untouched = '1'")
    newest = run_of(record_parts("h-e2e-newest", "op-e2e-newest", handoff_parts("false_complete")))
    rows = page.locator("#runs-rows > li")
    # Newest first; the older row is the same element, not re-rendered.
    expect(rows.first).to_have_id(f"run-row-{newest}", timeout=LIVE_TIMEOUT_MS)
    expect(rows.first).to_contain_text("False complete", timeout=LIVE_TIMEOUT_MS)
    expect(rows).to_have_count(2)
    expect(page.locator("#runs-title")).to_have_text("2 runs")
    expect(page.locator(f"#run-row-{older}")).to_have_attribute("data-untouched", "1")
    assert csp_errors(page) == []


def test_a_resolved_wait_leaves_the_open_waits_and_a_sooner_one_goes_first(page, server):
    from datetime import UTC, datetime, timedelta

    from receipts.models import Handoff
    from tests.conftest import record_wait_for

    later = record_parts("h-e2e-later", "op-e2e-later", handoff_parts("waiting"))
    resolved = record_parts("h-e2e-resolved", "op-e2e-resolved", handoff_parts("waiting"))
    log_in(page, server)
    page.goto(f"{server.url}/waits/")
    wait_snapshot(page)  # marked after the snapshot: it replaces the server-rendered rows, as it should
    expect(page.locator("#waits-rows > li")).to_have_count(2)
    page.evaluate(f"document.getElementById('wait-{later}').dataset.untouched = '1'")
    in_db_thread(lambda: record_wait_for(Handoff.objects.get(pk=resolved), resolved=True, resolution="approved"))
    expect(page.locator(f"#wait-{resolved}")).to_have_count(0, timeout=LIVE_TIMEOUT_MS)
    expect(page.locator(f"#resolved-{resolved}")).to_contain_text("Approved")
    expect(page.locator("#waits-summary")).to_have_text("1 open wait.")
    soon = datetime.now(UTC) + timedelta(minutes=5)
    sooner = record_parts("h-e2e-sooner", "op-e2e-sooner", handoff_parts("waiting", deadline=soon))
    expect(page.locator("#waits-rows > li").first).to_have_id(f"wait-{sooner}", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#waits-summary")).to_have_text("2 open waits.")
    expect(page.locator(f"#wait-{later}")).to_have_attribute("data-untouched", "1")
    assert csp_errors(page) == []


def test_the_page_asks_for_a_resync_when_a_runs_sequence_skips(page, server):
    from receipts.ingest import broadcast

    pk = record_parts("h-e2e-gap", "op-e2e-gap", handoff_parts("waiting"))  # five receipts: seq 5
    run_id = run_of(pk)
    sent: list[str] = []
    page.on("websocket", lambda ws: ws.on("framesent", lambda payload: sent.append(str(payload))))
    log_in(page, server)
    page.goto(f"{server.url}/runs/{run_id}/")
    wait_snapshot(page)  # the page's baseline: seq 5 (an open socket alone is not; the hub sends it listening)
    event = {
        "type": "run.changed",
        "run": run_id,
        "operation_id": "op-e2e-gap",
        "seq": 7,  # 6 never arrived
        "status": "running",
        "dry_run": False,
        "at": "2026-01-01T00:00:00+00:00",
    }
    in_db_thread(broadcast.publish, event)
    expect(page.locator("body")).to_have_attribute("data-resyncs", "1", timeout=LIVE_TIMEOUT_MS)
    assert any('"resync"' in frame for frame in sent), sent
    # The server answered with a snapshot, which resets the page's baseline to the database's seq.
    expect(page.locator("#ws-seq")).to_have_attribute("data-marker", re.compile("snapshot"))
    expect(page.locator(f"#handoff-{pk}")).to_contain_text("Waiting on approval")


def test_a_waits_countdown_moves(page, server):
    record_parts("h-e2e-wait", "op-e2e-wait", handoff_parts("waiting"))
    log_in(page, server)
    page.goto(f"{server.url}/waits/")
    countdown = page.locator("#waits-list time.countdown").first
    expect(countdown).to_have_text(re.compile(r"^due in 0h \d\dm \d\ds$"))
    before = countdown.inner_text()
    expect(countdown).not_to_have_text(before, timeout=3000)
    expect(page.locator("#waits-list .local-time").first).to_contain_text(re.compile(r"GMT\+1|CET"))
    shoot(page, "waits")


def test_every_page_renders_and_is_saved_as_a_screenshot(page, server):
    record_parts("h-e2e-ok", "op-e2e-ok", handoff_parts("healthy"))
    record_parts("h-e2e-false", "op-e2e-false", handoff_parts("false_complete"))
    pk = record_parts("h-e2e-wait2", "op-e2e-wait2", handoff_parts("waiting"))
    run_id = run_of(pk)
    assert page.goto(f"{server.url}/login/").status == 200
    shoot(page, "login")
    log_in(page, server)
    for path, name in [
        ("/", "overview-full"),
        ("/runs/", "runs"),
        ("/runs/?verdict=FALSE_COMPLETE", "runs-filtered"),
        (f"/runs/{run_id}/", "run-detail-waiting"),
        ("/waits/?mine=1", "waits-mine"),
        ("/false-completions/", "false-completions"),
        ("/system/", "system"),
    ]:
        response = page.goto(server.url + path)
        assert response.status == 200, path
        shoot(page, name)
    page.set_viewport_size({"width": 390, "height": 844})
    for path, name in [("/", "phone-overview"), (f"/runs/{run_id}/", "phone-run-detail")]:
        page.goto(server.url + path)
        wait_live(page)
        shoot(page, name)
    assert csp_errors(page) == []


def test_the_keyboard_reaches_the_navigation_and_the_verdict_links(page, server):
    log_in(page, server)
    page.keyboard.press("Tab")
    expect(page.locator(".skip")).to_be_focused()
    focused = []
    for _ in range(60):  # the header search and the window links come before the verdict links
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.textContent.trim()"))
    assert "Runs" in focused and "Waits" in focused and any("Route rejected" in text for text in focused)


def test_an_agent_named_like_markup_is_shown_as_text(page, server):
    xss = "<img src=x onerror=alert(1)>"

    def _create():
        from receipts.models import Handoff, Run

        run = Run.objects.create(operation_id="op-xss", thread_id="t-xss")
        Handoff.objects.create(handoff_id="h-xss", run=run, sender=xss, verdict="HEALTHY")

    in_db_thread(_create)
    log_in(page, server)
    wait_live(page)
    expect(page.locator("#newest-handoffs")).to_contain_text(xss)
    assert page.locator("#newest-handoffs img").count() == 0


def test_a_user_without_the_viewer_permission_gets_a_403_page(page, server):
    page.goto(f"{server.url}/login/")
    page.fill("#id_username", "outsider")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Not allowed")
    shoot(page, "forbidden")


def test_a_scenario_run_by_a_real_worker_appears_live_with_its_verdict(page, server, worker_process):
    from agents import tasks
    from agents.demo.scenarios import create_run

    log_in(page, server)
    wait_live(page)
    page.evaluate("window.sidewispNoReload = true")
    run = in_db_thread(create_run, "false_complete")
    in_db_thread(tasks.start_run.delay, run.pk)

    newest = page.locator("#newest-handoffs")
    expect(newest).to_contain_text("False complete", timeout=30_000)
    expect(page.locator("[data-count=FALSE_COMPLETE]")).to_have_text("1")
    assert page.evaluate("window.sidewispNoReload") is True
    shoot(page, "overview-scenario")
