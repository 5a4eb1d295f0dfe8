"""Sidewisp settings, read from the environment (see README: Environment)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from sidewisp.ops import logs
from sidewisp.ops.env import env_bool, env_float, env_headers, env_int, env_list, env_networks, env_str, env_url
from sidewisp.sso import config as sso_config

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("SIDEWISP_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)

_DEV_SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        msg = "SECRET_KEY must be set when DEBUG is off (make run sets DEBUG=1 for development)"
        raise ImproperlyConfigured(msg)
    SECRET_KEY = _DEV_SECRET_KEY

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "axes",
    "receipts",
    "agents",
    "agents.demo",
    "sidewisp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "sidewisp.web.security.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Every query string checked once, before any view or admin filter reads it (issue 29 §2): 414, or 400 in words.
    "sidewisp.web.refusals.QueryStringMiddleware",
    # A view that lost the database answers 503 in words, saying whether anything was done (issue 19 §2).
    "sidewisp.web.refusals.DatabaseUnreachableMiddleware",
    # Last, as django-axes asks: it turns a lock-out into the lock-out page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "sidewisp.urls"
ASGI_APPLICATION = "sidewisp.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
# SQLite under var/ is the embedded default; PostgreSQL through DATABASE_URL.
DATABASE_URL = env_url(
    "DATABASE_URL",
    f"sqlite:///{VAR_DIR / 'sidewisp.sqlite3'}",
    schemes=("sqlite", "postgres", "postgresql", "pgsql"),
)
DATABASES = {"default": dj_database_url.parse(DATABASE_URL)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The embedded database lives under var/, which a fresh clone does not have yet.
    Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    # Workers and the web process write to one file: wait for locks instead of
    # failing, take the write lock up front, and let readers run beside writers.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file (not :memory:) so a worker process can share the test database;
    # named per test process so that two test runs on one machine never collide.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-sidewisp-{os.getpid()}.sqlite3")}
else:
    DATABASES["default"]["TEST"] = {"NAME": f"test_sidewisp_{os.getpid()}"}
    DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# The evidence writer's statements prepared once per connection (receipts.queries.prepared); off behind a pooler in
# transaction mode that does not track prepared statements (PgBouncer before 1.21).
SIDEWISP_PREPARED_WRITES = env_bool("SIDEWISP_PREPARED_WRITES", True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: broker, channel layer, cache ----------------------------------
REDIS_URL = env_url("REDIS_URL", "redis://127.0.0.1:6379/0", schemes=("redis", "rediss"))
# One name isolates a deployment (or a test run, or one worker of a parallel test run) sharing a Redis with
# others: its Celery queue and control exchange, its channel-layer prefix and its cache keys.
CELERY_TASK_DEFAULT_QUEUE = env_str("SIDEWISP_QUEUE", "sidewisp")

CACHES = {
    "default": {
        # Django's Redis cache, one client kept per connection pool (sidewisp.cache: the same commands, less CPU).
        "BACKEND": "sidewisp.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": CELERY_TASK_DEFAULT_QUEUE,
        "OPTIONS": {"socket_connect_timeout": 2, "socket_timeout": 2},
    }
}

# --- Celery (at-least-once) -------------------------------------------------
# acks_late + reject_on_worker_lost + prefetch 1: a task whose worker dies is
# redelivered, never lost. The visibility timeout and a restore sweep every 2 s
# bring a dead worker's task back within about 30 s. Tasks must therefore be
# idempotent and hold a per-run lease (see agents/leases.py).
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_VISIBILITY_TIMEOUT = env_int("CELERY_VISIBILITY_TIMEOUT", 20, minimum=5)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_BROKER_VISIBILITY_TIMEOUT,
    "unacked_restore_interval": 2,
    "unacked_restore_throttle": 1,
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# kombu's Redis transport with one fault closed: a Redis restart must not stop the worker (sidewisp/broker.py).
CELERY_BROKER_TRANSPORT = "sidewisp.ops.broker:Transport"
# A broker blip leaves running graphs running: their ack may be lost, and the task then comes
# back after the visibility timeout and finds its run settled. Cancelling would restart them all.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# The queue name isolates the deployment (set above): its remote-control exchange (worker pings) too.
CELERY_CONTROL_EXCHANGE = CELERY_TASK_DEFAULT_QUEUE

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        # Redis pub/sub channels ignore the database number: the prefix isolates.
        "CONFIG": {"hosts": [REDIS_URL], "prefix": CELERY_TASK_DEFAULT_QUEUE},
    }
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE: dict = {
    # Beat's own heartbeat (sidewisp.ops.health.check_beat): a stopped beat is a banner on every page within seconds.
    "beat-heartbeat": {"task": "receipts.tasks.beat_heartbeat", "schedule": 2.0, "options": {"expires": 2.0}},
    # The workers' status (who answered a ping, when): pages and /healthz read it instead of pinging.
    "worker-status": {"task": "sidewisp.tasks.record_worker_status", "schedule": 2.0, "options": {"expires": 2.0}},
    # The overview's hourly rollup: its deltas folded into one row per hour and verdict (receipts.queries.rollups).
    "compact-rollups": {"task": "sidewisp.tasks.compact_rollups", "schedule": 60.0, "options": {"expires": 60.0}},
    # Verdicts of waits depend on the time: a passed deadline turns a wait UNCERTAIN.
    "reclassify-overdue-waits": {"task": "receipts.tasks.reclassify_overdue_waits", "schedule": 15.0},
    # Overdue waits are escalated to a backup owner or decided by the safe default (reject).
    "expire-overdue-waits": {"task": "receipts.tasks.expire_overdue_waits", "schedule": 30.0},
    # Runs whose worker vanished (lease expired, task gone) are re-enqueued (agents.host.execution.take_over_stalled).
    "take-over-stalled-runs": {"task": "agents.tasks.take_over_stalled_runs", "schedule": 15.0},
    # What an operator action promised a worker and the broker did not take (it was down) is sent again.
    # A sweep that waited in the queue longer than that is dropped: the next one does its work.
    "send-outbox-intents": {
        "task": "receipts.tasks.send_outbox_intents",
        "schedule": 5.0,
        "options": {"expires": 10.0},
    },
}

# --- Auth and sessions ------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"
# django-axes first: it refuses a locked-out login before any password is checked.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
    # Single sign-on (issue 22 §1): answers only its own callback, and only when SIDEWISP_OIDC is set.
    "sidewisp.sso.backend.SsoBackend",
]
# OpenID Connect beside the local log-in (sidewisp.sso; README "Single sign-on"): None, off, unless
# SIDEWISP_OIDC_ISSUER is set, and then the client, the scopes, the claims and the group map are checked here.
SIDEWISP_OIDC = sso_config.from_environment()
# Login throttling (django-axes, database handler: one count for every web process). Two counts,
# so that guessing from one address cannot lock a person out everywhere else: 5 failures for one
# username from one address refuse that username from that address, and 20 failures from one
# address (for any usernames) refuse that address, each until the cool-off has passed since the
# last failure. The same username from another address still logs in (sidewisp.web.lockout.LoginThrottle
# holds the second limit). Counts are not reset by a success (a reset would also clear the address
# count, so one valid account could unlock an address's guessing) and not extended by attempts made
# while locked out (so an attacker cannot keep anyone locked out for good). The address is
# REMOTE_ADDR, which a trusted proxy's X-Forwarded-For sets (SIDEWISP_TRUSTED_PROXIES, sidewisp.web.proxies).
AXES_HANDLER = "sidewisp.web.lockout.LoginThrottle"
AXES_FAILURE_LIMIT = env_int("SIDEWISP_LOGIN_FAILURE_LIMIT", 5, minimum=1)
SIDEWISP_LOGIN_ADDRESS_LIMIT = env_int("SIDEWISP_LOGIN_ADDRESS_LIMIT", 20, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("SIDEWISP_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_RESET_ON_SUCCESS = False
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_CALLABLE = "sidewisp.web.lockout.locked_out_response"
# No row per successful login (address and browser of every session); failed attempts are kept
# only until their cool-off ends. Never log a password, a CSRF token or the attempted username.
AXES_DISABLE_ACCESS_LOG = True
AXES_SENSITIVE_PARAMETERS = ["username", "ip_address", "csrfmiddlewaretoken"]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

# --- Security headers (production values when DEBUG is off) ----------------
# Opt-in: where TLS ends (this process or a proxy) is the deployment's choice; check --deploy warns if unset.
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
# Forwarded headers (X-Forwarded-For, X-Forwarded-Proto) are believed only from these proxies' addresses
# (sidewisp.web.proxies, an ASGI wrapper); nothing trusts a header by itself, so no SECURE_PROXY_SSL_HEADER.
SIDEWISP_TRUSTED_PROXIES = env_networks("SIDEWISP_TRUSTED_PROXIES")
SESSION_COOKIE_SECURE = not DEBUG
CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# --- Static files -------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
# The ASGI app serves static files itself in development; in production put them
# behind the reverse proxy (collectstatic into STATIC_ROOT) or turn this on.
SIDEWISP_SERVE_STATIC = env_bool("SIDEWISP_SERVE_STATIC", DEBUG)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# The filters (sidewisp/ops/logs.py) keep tracebacks of refusals, database-quoted values and beat's routine lines out.
LOGGING = logs.configuration(level=env_str("LOG_LEVEL", "INFO"))

# --- Sidewisp -----------------------------------------------------------------
# How long a worker heartbeat may be silent before /healthz reports it down.
SIDEWISP_WORKER_PING_TIMEOUT = env_float("SIDEWISP_WORKER_PING_TIMEOUT", 1.0, minimum=0.1)
# A run's lease expires this long after its holder's last renewal (a dead worker's
# run can be taken over after that); renewed every third of it.
SIDEWISP_LEASE_SECONDS = env_int("SIDEWISP_LEASE_SECONDS", 30, minimum=3)
# issue 19 §1: an outbox intent sent but not applied by a worker this long after is sent again (receipts.notify.outbox);
# metrics and the "unapplied" alert rule count work still unapplied this long after its promise.
SIDEWISP_INTENT_APPLY_SECONDS = env_int("SIDEWISP_INTENT_APPLY_SECONDS", 20, minimum=1)
# issue 29 item 5: a running observed run whose app sent no receipt for this long is shown "silent since …"
# (not running, not failed), counted in /metrics and by "silent" alert rules; its next receipt ends that.
SIDEWISP_SILENT_AFTER = env_int("SIDEWISP_SILENT_AFTER", 900, minimum=10)
SIDEWISP_MODEL = env_str("SIDEWISP_MODEL", "scripted")
# The graphs hosted runs drive (agents.host.registry): a JSON object of name → "path/to/file.py:attr" or
# "package.module:attr" (or {"graph", "verifier", "wait_policies"}), or the path of a langgraph.json
# file. Empty: the demo team alone, as "demo".
SIDEWISP_GRAPHS = env_str("SIDEWISP_GRAPHS", "")
# Demo scenarios started per second by beat; `make run` sets 0.1, 0 is off.
SIDEWISP_DEMO_RATE = env_float("SIDEWISP_DEMO_RATE", 0.0)
if SIDEWISP_DEMO_RATE > 0:
    CELERY_BEAT_SCHEDULE["demo-traffic"] = {"task": "agents.tasks.demo_tick", "schedule": 1 / SIDEWISP_DEMO_RATE}

# --- issue 14 §4: the receipts API and remote mode (sidewisp.api, agents.observe.remote) ------------
# Remote mode: this process's agents post their receipts to the Sidewisp server at this URL with
# this source token (made in the admin) instead of writing to a database. Empty: local mode.
SIDEWISP_REMOTE_URL = env_str("SIDEWISP_REMOTE_URL", "")
SIDEWISP_REMOTE_TOKEN = env_str("SIDEWISP_REMOTE_TOKEN", "")
if SIDEWISP_REMOTE_URL:
    SIDEWISP_REMOTE_URL = env_url("SIDEWISP_REMOTE_URL", "", schemes=("http", "https"))
    if not SIDEWISP_REMOTE_TOKEN:
        msg = "SIDEWISP_REMOTE_TOKEN must be set when SIDEWISP_REMOTE_URL is (make a source token in the admin)"
        raise ImproperlyConfigured(msg)
# Seconds an API call may take before remote mode counts the server as away.
SIDEWISP_REMOTE_TIMEOUT = env_float("SIDEWISP_REMOTE_TIMEOUT", 10.0, minimum=0.1)
# The evidence writer's queue, per process (sidewisp_agent.writer): entries that may wait to be stored, and how
# long an agent waits for room in a full queue before the entry is dropped (counted, and reported on its run).
SIDEWISP_WRITER_CAPACITY = env_int("SIDEWISP_WRITER_CAPACITY", 10_000, minimum=1)
SIDEWISP_WRITER_WAIT_SECONDS = env_float("SIDEWISP_WRITER_WAIT_SECONDS", 30.0, minimum=0.0)
# Its lanes on PostgreSQL: batches written at once under a backlog, each on a thread and connection of its own
# (sidewisp_agent.lanes; SQLite writes one transaction at a time: one lane there).
SIDEWISP_WRITER_LANES = env_int("SIDEWISP_WRITER_LANES", 2, minimum=1)
# The server side: requests per token per window (seconds), and the largest body it reads.
SIDEWISP_API_RATE_LIMIT = env_int("SIDEWISP_API_RATE_LIMIT", 600, minimum=1)
SIDEWISP_API_RATE_WINDOW = env_int("SIDEWISP_API_RATE_WINDOW", 60, minimum=1)
SIDEWISP_API_MAX_BODY_BYTES = env_int("SIDEWISP_API_MAX_BODY_BYTES", 1_000_000, minimum=1024)
if SIDEWISP_API_MAX_BODY_BYTES > 2_621_440:  # Django refuses larger bodies first (DATA_UPLOAD_MAX_MEMORY_SIZE)
    msg = "SIDEWISP_API_MAX_BODY_BYTES must be at most 2621440"
    raise ImproperlyConfigured(msg)


# --- Metrics and traces (issue 14; README: Metrics and traces) ------------------------------------
# /metrics answers only a request that carries `Authorization: Bearer <SIDEWISP_METRICS_TOKEN>` or comes
# from an address in SIDEWISP_METRICS_ALLOW (CIDRs, matched against REMOTE_ADDR). Neither set: refused.
SIDEWISP_METRICS_TOKEN = env_str("SIDEWISP_METRICS_TOKEN", "").strip()
if SIDEWISP_METRICS_TOKEN and len(SIDEWISP_METRICS_TOKEN) < 16:
    msg = "SIDEWISP_METRICS_TOKEN must be at least 16 characters (or unset)"
    raise ImproperlyConfigured(msg)
SIDEWISP_METRICS_ALLOW = env_networks("SIDEWISP_METRICS_ALLOW")
# Each handoff verdict change as an OTLP/HTTP span (receipts.notify.traces). Unset: off, nothing leaves the process.
SIDEWISP_OTLP_ENDPOINT = ""
if env_str("SIDEWISP_OTLP_ENDPOINT", "").strip():
    SIDEWISP_OTLP_ENDPOINT = env_url("SIDEWISP_OTLP_ENDPOINT", "", schemes=("http", "https"))
SIDEWISP_OTLP_HEADERS = env_headers("SIDEWISP_OTLP_HEADERS")
SIDEWISP_OTLP_SERVICE_NAME = env_str("SIDEWISP_OTLP_SERVICE_NAME", "sidewisp")
SIDEWISP_OTLP_TIMEOUT = env_float("SIDEWISP_OTLP_TIMEOUT", 10.0, minimum=0.1)

# --- Notifications and alerts (issue 14 §1: receipts.notify.notifications, receipts.notify.alerts) ---------------
# Links in notification payloads: this base URL plus the page's path (the run page, the waits inbox).
SIDEWISP_BASE_URL = env_url("SIDEWISP_BASE_URL", "http://127.0.0.1:8000", schemes=("http", "https")).rstrip("/")
# Unset in production is a start-up warning (sidewisp.ops.checks); `make run` sets it from its own address.
SIDEWISP_BASE_URL_CONFIGURED = bool(env_str("SIDEWISP_BASE_URL", "").strip())
if "@" in SIDEWISP_BASE_URL.split("://", 1)[1].split("/", 1)[0]:
    msg = "SIDEWISP_BASE_URL must not carry credentials (user:password@)"
    raise ImproperlyConfigured(msg)
# A wait's owner is reminded this long before its deadline.
SIDEWISP_NOTIFY_LEAD_MINUTES = env_int("SIDEWISP_NOTIFY_LEAD_MINUTES", 10, minimum=1)
# One webhook or e-mail attempt gives up after this long; a delivery is tried this many times in all.
SIDEWISP_NOTIFY_TIMEOUT = env_float("SIDEWISP_NOTIFY_TIMEOUT", 5.0, minimum=0.1)
SIDEWISP_NOTIFY_ATTEMPTS = env_int("SIDEWISP_NOTIFY_ATTEMPTS", 5, minimum=1)
# Webhooks and Slack reach public addresses only (receipts.notify.destinations); these networks too, e.g.
# "10.20.0.0/16" for a receiver on the private network ("127.0.0.0/8" for a receiver on this host).
SIDEWISP_WEBHOOK_ALLOW_NETWORKS = env_networks("SIDEWISP_WEBHOOK_ALLOW_NETWORKS")
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = SIDEWISP_NOTIFY_TIMEOUT
DEFAULT_FROM_EMAIL = env_str("SIDEWISP_FROM_EMAIL", "sidewisp@localhost")
# Opt-in demo (ensure_demo_user): ops-lead's signed webhook and a FALSE_COMPLETE alert rule to this URL.
SIDEWISP_DEMO_WEBHOOK_URL = ""
if env_str("SIDEWISP_DEMO_WEBHOOK_URL", "").strip():
    SIDEWISP_DEMO_WEBHOOK_URL = env_url("SIDEWISP_DEMO_WEBHOOK_URL", "", schemes=("http", "https"))
SIDEWISP_DEMO_WEBHOOK_SECRET = env_str("SIDEWISP_DEMO_WEBHOOK_SECRET", "")
CELERY_BEAT_SCHEDULE |= {
    # Owners are reminded of waits due within the lead time.
    "remind-due-waits": {"task": "receipts.tasks.remind_due_waits", "schedule": 30.0, "options": {"expires": 30.0}},
    # Deliveries whose retry never reached the broker are promised again.
    "resend-stalled-deliveries": {
        "task": "receipts.tasks.resend_stalled_deliveries",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    # Window, overdue and heartbeat rules (verdict rules also react at once, in the recording transaction).
    # Observed runs that stopped sending receipts are marked silent (receipts.ingest.silence).
    "mark-silent-runs": {"task": "receipts.tasks.mark_silent_runs", "schedule": 5.0, "options": {"expires": 10.0}},
    "evaluate-alert-rules": {
        "task": "receipts.tasks.evaluate_alert_rules",
        "schedule": 5.0,
        "options": {"expires": 10.0},
    },
}
# --- end notifications and alerts

# --- issue 22 §3: retention (receipts.retention; README: Retention) -----------------------------------
# How often beat prunes what the retention policy (admin) no longer keeps, the most rows one statement
# removes (each its own short transaction), and the least pause between statements.
SIDEWISP_RETENTION_EVERY_SECONDS = env_float("SIDEWISP_RETENTION_EVERY_SECONDS", 3600.0, minimum=1.0)
SIDEWISP_RETENTION_BATCH_ROWS = env_int("SIDEWISP_RETENTION_BATCH_ROWS", 5000, minimum=1)
SIDEWISP_RETENTION_PAUSE_SECONDS = env_float("SIDEWISP_RETENTION_PAUSE_SECONDS", 0.05)
# The share of the time pruning keeps a statement running: after a statement that took t seconds it rests
# t * (1 - d) / d (at least the pause above), so on a busy database it slows down instead of the pages.
SIDEWISP_RETENTION_DUTY_CYCLE = env_float("SIDEWISP_RETENTION_DUTY_CYCLE", 0.25, minimum=0.01)
if SIDEWISP_RETENTION_DUTY_CYCLE > 1:
    msg = "SIDEWISP_RETENTION_DUTY_CYCLE must be at most 1 (1: no rest beyond the pause)"
    raise ImproperlyConfigured(msg)
CELERY_BEAT_SCHEDULE["prune-retention"] = {
    "task": "receipts.tasks.prune_retention",
    "schedule": SIDEWISP_RETENTION_EVERY_SECONDS,
    "options": {"expires": SIDEWISP_RETENTION_EVERY_SECONDS},
}
# --- end issue 22 §3
