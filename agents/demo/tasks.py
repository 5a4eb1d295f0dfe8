"""The demo traffic task (Celery beat at SIDEWISP_DEMO_RATE).

It starts demo runs only while the demo graph is registered: with a SIDEWISP_GRAPHS that leaves "demo"
out there is no demo traffic, and the tick returns quietly (one INFO line per worker, no traceback)
instead of failing every tick (issue 30 §6).
"""

from __future__ import annotations

import logging

from celery import shared_task

from agents.demo.scenarios import DEMO_GRAPH, start_demo_run
from agents.host import registry

log = logging.getLogger(__name__)
_told = False


# The name the beat schedule in sidewisp/settings.py uses.
@shared_task(name="agents.tasks.demo_tick")
def demo_tick() -> int | None:
    """The new demo run's pk, or None (no demo traffic) when the demo graph is not registered."""
    global _told
    if DEMO_GRAPH not in registry.graphs():
        if not _told:
            log.info("demo traffic is off: SIDEWISP_GRAPHS does not register the %r graph", DEMO_GRAPH)
            _told = True
        return None
    return start_demo_run().pk
