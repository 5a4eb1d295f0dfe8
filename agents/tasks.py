"""Thin Celery tasks: re-fetch by id, call one function. Retry policy lives here."""

from __future__ import annotations

from celery import shared_task

from agents import execution

RETRY = {"autoretry_for": (execution.LeaseBusy,), "retry_backoff": 1, "retry_backoff_max": 10, "max_retries": 60}


@shared_task(**RETRY)
def start_run(run_id: int) -> str:
    return execution.start(run_id)


@shared_task(**RETRY)
def resume_run(decision_id: int) -> str:
    return execution.resume(decision_id)


@shared_task(**RETRY)
def reverify(run_id: int) -> str:
    return execution.reverify(run_id)
