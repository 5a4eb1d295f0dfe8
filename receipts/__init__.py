"""Receipts: the evidence app. It stores what agents did at each handoff, judges it and lets operators act on it.

Its rooms, each a sub-package whose `__init__` says what it may import:

- verdicts/: the bundle parser and the classifier, plain Python with no Django (values in, values out).
- ingest/: evidence arriving: intake entries, recording parts and reports, batches, run lifecycle and
  health, contracts, the events broadcast to browsers and the domain signals.
- actions/: the operator actions (decide a wait, settle, reassign, tokens), each audited.
- notify/: notifications, alert rules, the outbox and trace export, fed by the domain signals.
- queries/: what the pages read: dashboard, history, team map, route statistics, rollups.
- org/: people and teams: roles, teams, the audit log, single sign-on identities.
- workers/: what workers and remote sources need: deliveries, claims, runtime, sources, the deployment.
- retention/: pruning what the retention policy no longer keeps, its month partitions and its admin.

Django's conventional modules stay at the app's root: models/ (a package), admin, apps, tasks, migrations,
management/.
"""
