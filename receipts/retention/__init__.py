"""Retention: what the retention policy no longer keeps is pruned, in bounded batches, children before parents.

`pruner` prunes (its names are re-exported here: `retention.prune`, `retention.last_run`); `partitions`
drops a whole month of receipts on PostgreSQL; `admin` lets an admin edit the policy and run a prune.
May import: receipts.models, receipts.ingest (runs), receipts.org (audit); never: receipts.actions, notify,
queries, workers, agents, sidewisp.
"""

from receipts.retention.pruner import KIND_LABELS, KINDS, PRUNED, LastRun, ended_before, last_run, prune, pruning

__all__ = ["KINDS", "KIND_LABELS", "PRUNED", "LastRun", "ended_before", "last_run", "prune", "pruning"]
