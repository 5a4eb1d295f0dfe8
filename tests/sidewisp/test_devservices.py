"""`make run`'s supervisor: a child that dies is started again; the others keep running."""

from __future__ import annotations

import sys
import time

from sidewisp.devservices import Supervisor


def test_a_dying_child_is_restarted_with_a_log_line_while_the_others_keep_running(tmp_path, capsys):
    starts = tmp_path / "starts"
    children = {
        "worker": [sys.executable, "-c", f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)"],
        "web": [sys.executable, "-c", "import time; time.sleep(60)"],
    }
    supervisor = Supervisor(children, env={}, cwd=tmp_path)
    supervisor.backoff = dict.fromkeys(children, 0.1)
    try:
        supervisor.run(until=time.monotonic() + 3, interval=0.05)
        web = supervisor.processes["web"]
        assert web.poll() is None
        assert supervisor.restarts["web"] == 0
    finally:
        supervisor.stop()
    assert len(starts.read_text()) >= 3
    assert supervisor.restarts["worker"] >= 2
    assert "sidewisp: worker exited with code 3; restarting in" in capsys.readouterr().out


def test_the_backoff_doubles_while_a_child_keeps_dying_up_to_its_cap(tmp_path):
    supervisor = Supervisor({"beat": [sys.executable, "-c", "raise SystemExit(1)"]}, env={}, cwd=tmp_path)
    supervisor.backoff["beat"] = 20.0
    try:
        supervisor.run(until=time.monotonic() + 1, interval=0.05)
    finally:
        supervisor.stop()
    assert supervisor.backoff["beat"] == Supervisor.MAX_BACKOFF
    assert supervisor.restarts["beat"] == 0  # still waiting out the first 20 s
