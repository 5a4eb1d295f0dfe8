"""Telling others what happened: the outbox that carries promised work to the workers, notifications to wait
owners, alert rules, OpenTelemetry traces of verdict changes, and where a webhook may be sent.

May import: receipts.models, receipts.ingest, receipts.org, receipts.verdicts, receipts.workers.runtime;
never: receipts.actions, receipts.queries, receipts.tasks (the outbox sends a delivery by its task name),
sidewisp, agents.
"""
