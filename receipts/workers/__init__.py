"""The evidence side of the processes that do the work: the agent runtime port, a run's task deliveries,
remote sources posting receipts, this deployment's id, and claims on operators' decisions.

May import: receipts.models, receipts.ingest, receipts.org, receipts.verdicts, receipts.notify.outbox;
never: receipts.actions, receipts.queries, receipts.tasks, sidewisp, agents (the agent runtime registers
itself behind `runtime`).
"""
