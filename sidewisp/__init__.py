"""The Django project and the operator web layer: composition, no domain rules (those are receipts' and agents').

Rooms: `pages` (what each operator page shows), `live` (the live pages' hub, renderer and WebSocket), `ops`
(health, metrics, logs, checks, dev services, environment), `web` (CSP, proxies, login throttle, page access,
refusals), `sso` (OpenID Connect sign-in). At the root, the project's own modules: `settings`, `urls`, `asgi`,
`celery` (the Celery app, imported below so that tasks find it), `routing` (the WebSocket URLs), `views` (the
operator pages' and actions' views), `forms` (the actions' forms), `api` (the receipts API), `admin` and
`tasks` (Sidewisp's periodic tasks).
"""

from sidewisp.celery import app as celery_app

__all__ = ("celery_app",)
