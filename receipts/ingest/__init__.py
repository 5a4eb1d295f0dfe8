"""Ingest: evidence arriving. Entries are parsed (`intake`), recorded (`recording`, `setwise`, in `batches`),
classified and announced (`broadcast`, `signals`); runs change (`lifecycle`, `runs`) and their health is kept
(`health`, with the pure `assessment` and the settled rule `due`); contracts and storable JSON are checked.

May import: Django, Channels, receipts.models, receipts.verdicts; never: receipts.actions, notify, queries,
org, workers, retention, agents, sidewisp (they import this room, or hear its signals).
"""
