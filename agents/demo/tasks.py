"""The demo traffic task (Celery beat at SIDEWISP_DEMO_RATE)."""

from __future__ import annotations

from celery import shared_task

from agents.demo.scenarios import start_demo_run


# The name the beat schedule in sidewisp/settings.py uses.
@shared_task(name="agents.tasks.demo_tick")
def demo_tick() -> int:
    return start_demo_run().pk
