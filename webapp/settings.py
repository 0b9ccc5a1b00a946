"""specvet settings: one module, driven by environment variables.

Embedded default (no variables set): SQLite in the checkout, Celery tasks run in-process,
the rule-based inspector as the only policy. Set DATABASE_URL, CELERY_BROKER_URL and the
optional integrations to scale out; see README.md.
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from kombu import Exchange, Queue

from webapp.tempdir import private_temp_dir

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: str = "False") -> bool:
    return os.getenv(name, default).strip().lower() in {"1", "true", "yes", "on"}


def envint(name: str, default: int) -> int:
    return int(os.getenv(name, str(default)))


def envlist(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.getenv(name, default).split(",") if item.strip()]


def envsecret(name: str, default: str = "") -> str:
    """Read NAME, or the contents of the file named by NAME_FILE (container secrets)."""
    path = os.getenv(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.getenv(name, default)


DEBUG = envbool("DEBUG", "True")
# The site's own 404/500 pages even with DEBUG on (webapp.middleware.FriendlyErrorPagesMiddleware);
# False gives Django's technical pages, which list every URL pattern, for development.
FRIENDLY_ERROR_PAGES = envbool("FRIENDLY_ERROR_PAGES", "True")
SECRET_KEY = envsecret("SECRET_KEY") or (
    "insecure-dev-key-only-for-the-embedded-default" if DEBUG else ""
)
if not SECRET_KEY:
    raise RuntimeError("SECRET_KEY must be set when DEBUG is off")
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "axes",
    "annotation",
]

MIDDLEWARE = [
    "webapp.middleware.FriendlyErrorPagesMiddleware",  # first: sees the final 404 of any URL
    "django.middleware.security.SecurityMiddleware",
    "annotation.spectra.uploads.UploadTemporaryFilesMiddleware",  # deletes a request's temporary uploads
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "webapp.middleware.NulCharacterRefusalMiddleware",  # 400 for text holding \x00, everywhere
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "annotation.core.permissions.RoleRuleMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "webapp.middleware.ContentSecurityPolicyMiddleware",
    "webapp.auth.LoginAddressThrottleMiddleware",  # 429 for an address spraying user names
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out login into its 429 page
]

CONTENT_SECURITY_POLICY = os.getenv(
    "CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
    "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'",
)

ROOT_URLCONF = "webapp.urls"
WSGI_APPLICATION = "webapp.wsgi.application"
ASGI_APPLICATION = "webapp.asgi.application"

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
                "annotation.core.permissions.nav_context",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.getenv("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        conn_max_age=envint("DB_CONN_MAX_AGE", 60),
    )
}
# PostgreSQL's JIT compiler on each session (annotation.core.sql.session_settings): off by
# default. The vetting queue's nested queries are planned at costs that trigger it, and it
# compiled for 0.4-25 s per query to save milliseconds (issue 34: a 10^5-row run's next item
# took 25 s with it, 1 s without).
POSTGRES_JIT = envbool("POSTGRES_JIT", "False")
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Several in-process jobs write while pages read: wait for the lock instead of failing.
    # IMMEDIATE: a transaction takes the write lock when it begins. A deferred one that reads
    # first and then writes, while another process (the demo's worker) writes, gets "database
    # is locked" at once, without waiting for the timeout (SQLite cannot upgrade its snapshot).
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out username + address
    "django.contrib.auth.backends.ModelBackend",
]
# Login throttling (django-axes): LOGIN_FAILURE_LIMIT failed logins for one username from one
# address lock that pair out for LOGIN_COOLOFF_MINUTES; a success resets the count. Behind a
# reverse proxy set TRUSTED_PROXY_COUNT, or every visitor shares the proxy's address.
AXES_ENABLED = envbool("LOGIN_THROTTLING", "True")
AXES_FAILURE_LIMIT = envint("LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=envint("LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# Failures from one address over all user names (spraying), counted in the cache (CACHE_URL to
# share the count between processes) over the same cool-off: past it the address gets 429.
LOGIN_ADDRESS_FAILURE_LIMIT = envint("LOGIN_ADDRESS_FAILURE_LIMIT", 30)
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_LOCKOUT_CALLABLE = "webapp.auth.lockout_response"  # that page, or JSON for an API
AXES_CLIENT_IP_CALLABLE = "webapp.auth.client_ip"
TRUSTED_PROXY_COUNT = envint("TRUSTED_PROXY_COUNT", 0)
# API tokens (DRF authtoken) stop working this many hours after they were issued; users issue
# a new one on their API token page.
API_TOKEN_TTL_HOURS = envint("SPECVET_API_TOKEN_TTL_HOURS", 24 * 30)
# ... and never later than this many hours after the password sign-in (or the password sent to
# POST /api/token/issue/) they were issued on: a token cannot issue its own successor.
API_TOKEN_FAMILY_MAX_HOURS = envint("SPECVET_API_TOKEN_FAMILY_MAX_HOURS", 24 * 90)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.getenv("STATIC_ROOT", BASE_DIR / "staticfiles"))
MEDIA_ROOT = Path(os.getenv("MEDIA_ROOT", BASE_DIR / "media"))
# Training runs write datasets, metrics and checkpoints here; the web, training and inspection
# workers must all see this path (shared storage when they run on several machines).
TRAINING_OUTPUT_ROOT = Path(os.getenv("TRAINING_OUTPUT_ROOT", BASE_DIR / "var" / "training"))
# Folders a "local checkpoint" policy may load weights from (colon-separated): a path a user
# types is only ever loaded from inside one of these, or when it is a registered checkpoint.
POLICY_CHECKPOINT_ROOTS = [
    Path(root)
    for root in os.getenv(
        "POLICY_CHECKPOINT_ROOTS", f"{TRAINING_OUTPUT_ROOT}:{BASE_DIR / 'var' / 'checkpoints'}"
    ).split(":")
    if root
]
MEDIA_URL = "media/"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        )
    },
}

# Uploads of survey files: per-file and per-request limits.
SPECTRUM_UPLOAD_MAX_BYTES = envint("SPECTRUM_UPLOAD_MAX_BYTES", 50 * 1024 * 1024)
SPECTRUM_UPLOAD_MAX_FILES = envint("SPECTRUM_UPLOAD_MAX_FILES", 20)
# Reading one survey file (upload or load_spectra command): its content once decompressed (and
# a table's parsed numbers), pixels per spectrum, spectra per file. Past them it is refused.
SPECTRUM_MAX_UNCOMPRESSED_BYTES = envint("SPECTRUM_MAX_UNCOMPRESSED_BYTES", 64 * 1024 * 1024)
SPECTRUM_MAX_PIXELS = envint("SPECTRUM_MAX_PIXELS", 1_000_000)
SPECTRUM_MAX_SPECTRA_PER_FILE = envint("SPECTRUM_MAX_SPECTRA_PER_FILE", 5_000)
# Spectrum plots carry at most this many points per trace: what a plot can show, the lowest and
# highest pixel (and a gap) of each of 1,000 columns, wider than any plot of a 1,440 px page
# (min-max thinned beyond, every extreme kept); zooming fetches the window's own pixels. More
# only costs the page's size and the browser's drawing (issue 37 item 10).
SPECTRUM_PLOT_MAX_POINTS = envint("SPECTRUM_PLOT_MAX_POINTS", 3000)
# GET /api/spectra/<id>/?arrays=1 returns at most this many pixels per response (offset/limit
# page through the rest): about 8 MB of JSON.
SPECTRUM_API_MAX_ARRAY_PIXELS = envint("SPECTRUM_API_MAX_ARRAY_PIXELS", 100_000)
# A curation import ZIP (ShareGPT JSON + images): all members once unpacked (written to a
# temporary folder), and its one JSON file, which is parsed whole.
CURATION_IMPORT_MAX_UNPACKED_BYTES = envint("CURATION_IMPORT_MAX_UNPACKED_BYTES", 512 * 1024 * 1024)
CURATION_IMPORT_MAX_JSON_BYTES = envint("CURATION_IMPORT_MAX_JSON_BYTES", 64 * 1024 * 1024)
# One line of an import JSONL (one trajectory, images inline): read and parsed whole, so capped.
CURATION_IMPORT_MAX_LINE_BYTES = envint("CURATION_IMPORT_MAX_LINE_BYTES", 8 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("DATA_UPLOAD_MAX_MEMORY_SIZE", 10 * 1024 * 1024)
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
# Every temporary file and folder of the project (uploads, imports, exports) lives here, so that
# what a killed process leaves behind can be swept without touching anyone else's (older than
# SPECVET_TEMP_MAX_AGE_HOURS: at worker and serve_demo start, and `manage.py sweep_temp_files`).
SPECVET_TEMP_DIR = private_temp_dir(
    Path(os.getenv("SPECVET_TEMP_DIR", Path(tempfile.gettempdir()) / f"specvet-{os.getuid()}"))
)
SPECVET_TEMP_MAX_AGE_HOURS = envint("SPECVET_TEMP_MAX_AGE_HOURS", 6)
FILE_UPLOAD_TEMP_DIR = str(SPECVET_TEMP_DIR)
FILE_UPLOAD_HANDLERS = [
    "annotation.spectra.uploads.SizeCappedUploadHandler",  # stops keeping a file past the upload limit
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "annotation.spectra.uploads.CleanedTemporaryFileUploadHandler",  # deleted when the request ends
]

REST_FRAMEWORK = {
    # The token class first: DRF takes the first class's WWW-Authenticate challenge, so an
    # anonymous call or a bad token gets 401 (the session class has none and would give 403).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "webapp.auth.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "annotation.core.permissions.HasRoleRule",  # each API's role_rule; none declared: refused
    ],
    # JSON bodies nested deeper than agent.bounded_json.MAX_JSON_DEPTH get 400, not a 500.
    "DEFAULT_PARSER_CLASSES": [
        "webapp.parsers.DepthLimitedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    # A body over DATA_UPLOAD_MAX_MEMORY_SIZE gets a JSON 413 (Django alone answers an HTML 400).
    "EXCEPTION_HANDLER": "webapp.api_errors.api_exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "webapp.schema.SpecvetAutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"user": os.getenv("API_THROTTLE_USER", "6000/hour")},
}
# API throttle counters (and the survey-choice cache) live here: set CACHE_URL to a shared
# Redis when several app processes serve, or each process counts its own requests.
CACHE_URL = os.getenv("CACHE_URL", "")
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
        if CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    ),
    # Failed logins per address must be counted by every app process together (else each
    # gunicorn worker allows its own LOGIN_ADDRESS_FAILURE_LIMIT): the shared Redis, or without
    # one a table in the database (migrate creates it; `manage.py createcachetable` too).
    "logins": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": CACHE_URL,
            "KEY_PREFIX": "logins",
        }
        if CACHE_URL
        else {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "specvet_login_failures",
        }
    ),
}
SPECTACULAR_SETTINGS = {
    "TITLE": "specvet API",
    "DESCRIPTION": "Spectral inspection, curation, rating and vetting.",
    "VERSION": "0.1.0",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],  # the schema too
    "ENUM_NAME_OVERRIDES": {
        "LabelEnum": "annotation.spectra.models.Label",
        "CandidateStateEnum": "annotation.inspections.models.CandidateState",
        # what the API shows of a candidate: its state, or "interrupted" (no live worker runs it)
        "CandidateShownStateEnum": "annotation.inspections.apis.SHOWN_STATES",
        "CurationStateEnum": "annotation.curation.models.CurationState",
        "JobStateEnum": "annotation.core.models.JobState",
        "ExpertDecisionEnum": "annotation.inspections.models.ExpertDecisionValue",
        "VoteValueEnum": "annotation.curation.models.VoteValue",
        "AuditVerdictEnum": "annotation.curation.models.AuditVerdict",
        "PairOutcomeEnum": "annotation.rating.models.PairOutcome",
        "VersionKindEnum": "annotation.curation.models.VersionKind",
        "PlantedErrorKindEnum": "annotation.curation.models.PlantedErrorKind",
    },
}

# Celery: in-process by default (the test suite relies on it). SPECVET_BACKGROUND_JOBS=1 (what
# `make demo` / `manage.py serve_demo` set) sends jobs to a worker instead; without a
# CELERY_BROKER_URL that worker reads kombu's filesystem broker under CELERY_FILESYSTEM_BROKER_DIR,
# so no Redis is needed on one machine. A broker URL (Redis, RabbitMQ) is for real deployments.
SPECVET_BACKGROUND_JOBS = envbool("SPECVET_BACKGROUND_JOBS", "False")
CELERY_TASK_ALWAYS_EAGER = envbool(
    "CELERY_TASK_ALWAYS_EAGER", "False" if SPECVET_BACKGROUND_JOBS else "True"
)
CELERY_BROKER_URL = os.getenv("CELERY_BROKER_URL") or (
    "memory://" if CELERY_TASK_ALWAYS_EAGER else "filesystem://"
)
CELERY_FILESYSTEM_BROKER_DIR = Path(
    os.getenv("CELERY_FILESYSTEM_BROKER_DIR", BASE_DIR / "var" / "celery-broker")
)
CELERY_RESULT_BACKEND = os.getenv("CELERY_RESULT_BACKEND", "cache+memory://")
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = envint("CELERY_TASK_TIME_LIMIT", 6 * 60 * 60)
CELERY_TASK_SOFT_TIME_LIMIT = envint("CELERY_TASK_SOFT_TIME_LIMIT", 6 * 60 * 60 - 60)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# acks_late: a task whose broker connection dropped is redelivered, so stop it rather than
# finish it twice.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
    # A message taken by a worker that died (SIGKILL, lost machine) goes back to its queue
    # this long after delivery. A live worker's task that runs longer is delivered again too;
    # the job lease (annotation/core/leases.py) keeps the second copy waiting, never running twice.
    "visibility_timeout": envint("CELERY_VISIBILITY_TIMEOUT", 60 * 60),
    "unacked_restore_interval": envint("CELERY_RESTORE_INTERVAL", 10),
    "unacked_restore_throttle": 1,
    # Several deployments (or a staging copy) can share one Redis.
    "global_keyprefix": os.getenv("CELERY_REDIS_KEY_PREFIX", ""),
}
if CELERY_BROKER_URL.startswith("filesystem:"):
    # kombu's filesystem transport: one file per message, in one folder the web process writes
    # and the worker reads (webapp/celery.py creates the folders). A taken message is moved to
    # "processed" (a rename on the same disk, so two workers never take the same one). It has
    # no visibility timeout: a SIGKILLed worker's message is not handed out again. Our channel
    # writes each message whole before the reader can see it (webapp/broker.py).
    CELERY_BROKER_TRANSPORT = "webapp.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_FILESYSTEM_BROKER_DIR / "queue"),
        "data_folder_out": str(CELERY_FILESYSTEM_BROKER_DIR / "queue"),
        "store_processed": True,
        "processed_folder": str(CELERY_FILESYSTEM_BROKER_DIR / "processed"),
        "control_folder": str(CELERY_FILESYSTEM_BROKER_DIR / "control"),
        # How often the worker looks for message files when it has none, or has no free thread
        # (kombu then sleeps too): it bounds how fast short tasks follow each other.
        "polling_interval": float(os.getenv("CELERY_FILESYSTEM_POLLING_INTERVAL", "0.05")),
    }
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {
    "global_keyprefix": os.getenv("CELERY_REDIS_KEY_PREFIX", "")
}
CELERY_TASK_DEFAULT_QUEUE = "default"
# default: drafts, judges, standardization; inspection: one task per candidate; gpu: training.
CELERY_TASK_QUEUES = [
    Queue(name, Exchange(name), routing_key=name) for name in ("default", "inspection", "gpu")
]
CELERY_TASK_ROUTES = {
    "annotation.inspections.tasks.run_candidate": {"queue": "inspection"},
    "annotation.inspections.tasks.run_candidates": {"queue": "inspection"},
    "annotation.training_runs.tasks.run_training": {"queue": "gpu"},
}
# A job or candidate is tried at most this often, whatever ends an attempt (a lost worker, an
# unreachable model endpoint); endpoint outages wait JOB_RETRY_BACKOFF * 2**(attempt - 1) s.
JOB_MAX_ATTEMPTS = envint("JOB_MAX_ATTEMPTS", 4)
JOB_RETRY_BACKOFF = envint("JOB_RETRY_BACKOFF", 30)
# How long a second delivery of a job that a live worker still runs waits before looking again.
JOB_LEASE_RETRY_DELAY = envint("JOB_LEASE_RETRY_DELAY", 60)
# SQLite only (it has no leases to tell a live worker from a dead one): a running candidate
# nothing was heard from (its claim, a live step, a rollout) for this long shows as interrupted,
# and staff may resend it. On PostgreSQL a candidate is interrupted as soon as its lease is gone.
CANDIDATE_INTERRUPTED_AFTER = envint("CANDIDATE_INTERRUPTED_AFTER", 15 * 60)
# A run with more candidates than this sends their Celery messages from a background job
# ("enqueue_candidates") instead of at the end of the request that created it: 170,000 messages
# take minutes to send, longer than a web worker's request timeout.
INSPECTION_ENQUEUE_INLINE_MAX = envint("INSPECTION_ENQUEUE_INLINE_MAX", 1000)
# Candidates per Celery message for the rule-based inspector (a run with a model sends one per
# message): a batch shares its lease, claim, read and durable commit; a killed worker's batch is
# redelivered and its finished candidates are skipped.
INSPECTION_BATCH_SIZE = envint("INSPECTION_BATCH_SIZE", 16)
# Candidates per Celery message for a run on a model endpoint: their episodes are in flight at
# once (annotation/inspections/in_flight.py), up to INSPECTION_IN_FLIGHT per worker process and
# endpoint, shared by the process's pool threads; "name=K,name=K" sets it per endpoint.
INSPECTION_MODEL_BATCH_SIZE = envint("INSPECTION_MODEL_BATCH_SIZE", 32)
INSPECTION_IN_FLIGHT = envint("INSPECTION_IN_FLIGHT", 32)


def _limits_by_name(variable: str, text: str) -> dict[str, int]:
    limits = {}
    for item in filter(str.strip, text.split(",")):
        name, _, limit = item.partition("=")
        if not name.strip() or not limit.strip().isdigit() or not 1 <= int(limit) <= 4096:
            raise ImproperlyConfigured(
                f"{variable}: {item.strip()!r} must be NAME=K with K a whole number 1-4096"
            )
        limits[name.strip()] = int(limit)
    return limits


INSPECTION_IN_FLIGHT_BY_ENDPOINT = _limits_by_name(
    "INSPECTION_IN_FLIGHT_BY_ENDPOINT", os.getenv("INSPECTION_IN_FLIGHT_BY_ENDPOINT", "")
)
# The share of each run's finished candidates re-run in-process in the background and compared
# with what was stored (the run's first candidate always): a mismatch is an alarm on the run
# page and in the audit log. Runs whose policy samples (temperature > 0 or no seed) are not
# re-checked: a re-run is a new sample.
INSPECTION_RECHECK_RATE = float(os.getenv("INSPECTION_RECHECK_RATE", "0.01"))
CURATION_ACCEPTANCE_RULE = os.getenv("CURATION_ACCEPTANCE_RULE", "unanimous")

# Optional integrations: off until configured.
# These two register the model endpoint "default" on every migrate; its key is read from the
# OPENAI_API_KEY variable (or the file OPENAI_API_KEY_FILE names) only when a call is made, and
# only for that endpoint. Staff register other endpoints; a credential file they name must lie
# inside one of MODEL_ENDPOINT_SECRET_DIRS.
OPENAI_BASE_URL = os.getenv("OPENAI_BASE_URL", "")  # e.g. http://gpu-1:8000/v1 (vllm serve)
OPENAI_MODEL = os.getenv("OPENAI_MODEL", "")
MODEL_ENDPOINT_SECRET_DIRS = envlist("MODEL_ENDPOINT_SECRET_DIRS", "/run/secrets")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"refusal_without_traceback": {"()": "webapp.middleware.RefusalWithoutTraceback"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.getenv("LOG_LEVEL", "INFO")},
    "loggers": {
        # Failed logins and lockouts are warnings; every successful login is not worth a line.
        "axes": {"level": os.getenv("LOG_LEVEL_AXES", "WARNING")},
        # Django's default config gives "django" its own console handler (with DEBUG on) that
        # also propagates to the root's: every line, 403 tracebacks included, came out twice.
        # Naming the logger here drops that handler; the root's prints each record once.
        "django": {"level": "INFO"},
        "django.request": {"filters": ["refusal_without_traceback"]},
    },
}

if not DEBUG:
    SESSION_COOKIE_SECURE = envbool("SESSION_COOKIE_SECURE", "True")
    CSRF_COOKIE_SECURE = envbool("CSRF_COOKIE_SECURE", "True")
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", "True")
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", "True")
    SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", "False")
    if not SECURE_HSTS_PRELOAD:
        # Preloading is a commitment to browsers' lists that each deployment opts into.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
