"""Running Sidewisp: health checks and /healthz's data, the Prometheus metrics, logging filters, Django system
checks, the development services (`python -m sidewisp.ops.devservices`), the broker transport and the settings'
environment readers.

May import: receipts, agents (observe.writer), sidewisp.celery and Django; never: sidewisp.pages, sidewisp.live,
sidewisp.views or sidewisp.web (settings read `sidewisp.ops.env` before Django is set up; the pages read ops,
not the reverse).
"""
