"""The read side: what the operator pages show (the dashboard's lists and counts, a run's history, the team
map, route statistics, hourly rollups). Nothing here changes state.

May import: receipts.models, receipts.ingest (run health), receipts.org (team scopes), receipts.verdicts;
never: receipts.actions, receipts.notify, receipts.workers, receipts.tasks, sidewisp, agents.
"""
