"""Settings, read from environment variables (names in README's configuration table).

Every setting has an embedded default that runs on one machine with nothing installed:
SQLite and a filesystem Celery broker under MARKETPLACE_DATA_DIR. Production sets
DATABASE_URL, CELERY_BROKER_URL and the secrets.
"""

import os
from decimal import Decimal
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DATA_DIR = Path(os.environ.get("MARKETPLACE_DATA_DIR", BASE_DIR / "var")).resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("DJANGO_DEBUG", False)
# The fallback key is for local runs only; production settings refuse to start without one.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and env_bool("DJANGO_REQUIRE_SECRET_KEY", False):
        raise RuntimeError("DJANGO_SECRET_KEY must be set")
    SECRET_KEY = "insecure-local-only-" + "x" * 40
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "axes",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from our own static files
    "marketplace",
    "orders",
    "fleets",
    "datasets",
    "billing",
    "portal",  # the web pages: above the domain apps, imported by none of them
]

MIDDLEWARE = [
    "marketplace.observability.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "marketplace.request_limits.ApiRequestLimitsMiddleware",
    # Last, as django-axes asks: it answers a locked-out login with its lockout page.
    "axes.middleware.AxesMiddleware",
]
# django-axes first: it refuses a login while its (username, address) pair is locked out.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

ROOT_URLCONF = "marketplace.urls"
WSGI_APPLICATION = "marketplace.wsgi.application"
AUTH_USER_MODEL = "marketplace.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{DATA_DIR / 'marketplace.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Django's backend, its health check a poll of the socket instead of SELECT 1
    DATABASES["default"]["ENGINE"] = "marketplace.postgresql"
    # psycopg prepares a statement on its connection once it ran this many times there
    # (parsed and planned once, then only the values are sent); values bound by the server.
    # "off" for a pooler that cannot keep prepared statements (PgBouncer in transaction mode).
    _PREPARE_THRESHOLD = os.environ.get("DATABASE_PREPARE_THRESHOLD", "5")
    if _PREPARE_THRESHOLD.lower() != "off":
        DATABASES["default"]["OPTIONS"] = {
            **DATABASES["default"].get("OPTIONS", {}),
            "server_side_binding": True,
            "prepare_threshold": int(_PREPARE_THRESHOLD),
        }
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web server and Celery worker share the file: wait for locks instead of failing.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}
    DATABASES["default"]["CONN_MAX_AGE"] = 0

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
if os.environ.get("REDIS_URL"):
    CACHES["default"] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ["REDIS_URL"],
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"

EMAIL_BACKEND = os.environ.get(
    "DJANGO_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend"
)

# --- API -------------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "marketplace.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["marketplace.renderers.ApiJSONRenderer"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "marketplace.pagination.CreatedCursorPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "marketplace.schema.AutoSchema",
    "EXCEPTION_HANDLER": "marketplace.exception_handler.api_exception_handler",
    "NUM_PROXIES": int(os.environ.get("API_NUM_PROXIES", "0")),
    "DEFAULT_THROTTLE_RATES": {
        "anon": os.environ.get("API_THROTTLE_ANON", "60/minute"),
        "user": os.environ.get("API_THROTTLE_USER", "1200/minute"),
    },
}
if DEBUG:
    REST_FRAMEWORK["DEFAULT_RENDERER_CLASSES"].append(
        "rest_framework.renderers.BrowsableAPIRenderer"
    )

SPECTACULAR_SETTINGS = {
    "TITLE": "Motion dataset marketplace API",
    "DESCRIPTION": (
        "Order custom robot motion datasets priced at hours x task complexity. "
        "Authenticate programs with `Authorization: Bearer <api key>`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI and Redoc from drf-spectacular-sidecar's static files: no CDN, works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "marketplace.schema.document_error_codes",
    ],
    # One OpenAPI enum name per status choice set (several models have a `status`).
    "ENUM_NAME_OVERRIDES": {
        "OrderStatusEnum": "orders.models.Order.Status",
        "FleetStatusEnum": "fleets.models.Fleet.Status",
        "JobStatusEnum": "fleets.models.Job.Status",
        "OfferStatusEnum": "fleets.models.Offer.Status",
        "BidStatusEnum": "fleets.models.Bid.Status",
        "PaymentStatusEnum": "billing.models.Payment.Status",
        "EpisodeStatusEnum": "datasets.models.Episode.Status",
        "DeliveryStatusEnum": "datasets.models.Delivery.Status",
        "DeliveryKindEnum": "datasets.models.Delivery.Kind",
        "ExclusionReasonEnum": "datasets.models.ExclusionReason",
        "ClaimStatusEnum": "datasets.models.Claim.Status",
        "ClaimItemStatusEnum": "datasets.models.ClaimItem.Status",
        "DisputeStatusEnum": "datasets.models.Dispute.Status",
        "UploadMethodEnum": "datasets.api.UPLOAD_METHODS",
        "PaymentMethodEnum": "billing.models.Payment.Method",
    },
}

# --- Celery ----------------------------------------------------------------------------------
BROKER_DIR = DATA_DIR / "broker"
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "store_processed": False,
        "control_folder": str(BROKER_DIR / "control"),
        # An idle worker looks for new message files this often (kombu's default is 1 s, a
        # second added to every hop of the demo's order-to-delivery chain); a look is one
        # directory listing per queue.
        "polling_interval": float(os.environ.get("CELERY_BROKER_POLL_SECONDS", "0.1")),
    }
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # Redis redelivers a message not acknowledged within this time to another worker: it
    # must exceed the longest task (a large delivery's assembly), or that task runs twice.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT_SECONDS", "21600"))
    }
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# When the worker loses the broker, its unacknowledged (acks_late) messages go back to the
# queue and are redelivered: stop the running copies so no task runs twice at once.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Publishing while the broker is down: a few quick retries (a broker restart takes seconds),
# then the caller gives up and the work is left to the sweepers (marketplace/queueing.py),
# so a web request never hangs on the broker for long.
CELERY_TASK_PUBLISH_RETRY_POLICY = {
    "max_retries": int(os.environ.get("CELERY_PUBLISH_MAX_RETRIES", "3")),
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 1,
}
CELERY_TASK_DEFAULT_QUEUE = "default"
# A pool process that grew past this after a task is replaced (KiB; QA's decoding runs in a
# bounded child, so this is a backstop).
CELERY_WORKER_MAX_MEMORY_PER_CHILD = int(
    os.environ.get("CELERY_WORKER_MAX_MEMORY_PER_CHILD_KIB", str(1024 * 1024))
)
# Dispatch and QA/delivery tasks retry transient database and storage errors with exponential
# backoff (2 s, 4 s, ... with jitter) capped at this many seconds.
TASK_RETRY_BACKOFF_MAX_SECONDS = int(os.environ.get("TASK_RETRY_BACKOFF_MAX_SECONDS", "300"))
# Task events from the start (as `worker -E`), so Flower sees every task, not only those
# after its first periodic "enable events" broadcast; "sent" shows tasks still queued.
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("CELERY_WORKER_SEND_TASK_EVENTS", True)
CELERY_TASK_SEND_SENT_EVENT = env_bool("CELERY_TASK_SEND_SENT_EVENT", True)
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE: dict[str, dict] = {}  # each app's block below adds its periodic tasks

# --- Business knobs ----------------------------------------------------------------------------
ORDER_MIN_HOURS = os.environ.get("ORDER_MIN_HOURS", "1")
ORDER_MAX_HOURS = os.environ.get("ORDER_MAX_HOURS", "10000")
ORDER_MAX_ENVIRONMENTS = int(os.environ.get("ORDER_MAX_ENVIRONMENTS", "500"))
IDEMPOTENCY_KEY_TTL_HOURS = int(os.environ.get("IDEMPOTENCY_KEY_TTL_HOURS", "24"))
# Organizations' own event webhooks (customers: delivery.ready): plain http only for local runs.
CUSTOMER_WEBHOOK_ALLOW_INSECURE = env_bool("CUSTOMER_WEBHOOK_ALLOW_INSECURE", DEBUG)
CUSTOMER_WEBHOOK_MAX_ATTEMPTS = int(os.environ.get("CUSTOMER_WEBHOOK_MAX_ATTEMPTS", "8"))

# Trusted reverse proxies in front of the app (each appends to X-Forwarded-For); 0: none,
# only the socket's address counts (marketplace/client_address.py).
API_NUM_PROXIES = int(os.environ.get("API_NUM_PROXIES", "0"))
# Bodies of API requests: larger ones answer 413, JSON nested deeper answers 400 (in the error
# shape), before any parser runs (marketplace/request_limits.py).
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("API_MAX_BODY_BYTES", str(2 * 1024**2)))
API_MAX_JSON_DEPTH = int(os.environ.get("API_MAX_JSON_DEPTH", "32"))

# Login lockout (django-axes) on the portal's and the admin's login: after
# LOGIN_FAILURE_LIMIT failures for one username from one address, that pair is refused for
# LOGIN_LOCKOUT_MINUTES (a success in between resets the count).
AXES_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = float(os.environ.get("LOGIN_LOCKOUT_MINUTES", "15")) / 60  # hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "marketplace.client_address.client_address"
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_VERBOSE = False

# --- Production hardening (issue-independent defaults that are safe behind TLS) ---------------
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
if not DEBUG and env_bool("DJANGO_SECURE", False):
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 31536000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Logs: one JSON object per line with the request id (LOG_FORMAT=text for plain lines).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "marketplace.observability.RequestIdFilter"}},
    "formatters": {
        "json": {"()": "marketplace.observability.JsonFormatter"},
        "text": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["request_id"],
            "formatter": os.environ.get("LOG_FORMAT", "json"),
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
}

# --- Fleets and dispatch -----------------------------------------------------------------------
# Jobs are at most this many hours; an order's hours are split over its environments first.
FLEETS_MAX_JOB_HOURS = os.environ.get("FLEETS_MAX_JOB_HOURS", "4")
# How long a fleet has to accept an offer before it goes to the next fleet.
FLEETS_OFFER_TTL_SECONDS = int(os.environ.get("FLEETS_OFFER_TTL_SECONDS", "3600"))
# The highest payout rate per hour a fleet may set, in minor units of its currency (ISO 4217's
# exponent): 1,000,000 is 10,000.00 USD, EUR or GBP, and 1,000,000 JPY or KRW per hour. No
# offer ever pays more than the order's price per hour anyway (fleets/services/pay_terms.py).
FLEETS_MAX_PAYOUT_MINOR_UNITS_PER_HOUR = int(
    os.environ.get("FLEETS_MAX_PAYOUT_MINOR_UNITS_PER_HOUR", "1000000")
)
# An assigned job whose fleet sent no heartbeat for this long is taken back and re-dispatched.
FLEETS_HEARTBEAT_TIMEOUT_SECONDS = int(os.environ.get("FLEETS_HEARTBEAT_TIMEOUT_SECONDS", "21600"))
# An open job with no live offer for this long is dispatched again (lost messages, crashes).
FLEETS_STALE_OPEN_JOB_SECONDS = int(os.environ.get("FLEETS_STALE_OPEN_JOB_SECONDS", "300"))
# Jobs per dispatch transaction. A batch reads and locks every candidate fleet whatever its
# size, so larger batches spread that over more jobs (and place a little more); the fleets'
# rows wait for the batch (about 0.25 ms a job at 1,000 fleets: bench/README.md, "Dispatch").
FLEETS_DISPATCH_BATCH_SIZE = int(os.environ.get("FLEETS_DISPATCH_BATCH_SIZE", "2000"))
FLEETS_SWEEP_INTERVAL_SECONDS = int(os.environ.get("FLEETS_SWEEP_INTERVAL_SECONDS", "60"))
# Outgoing webhooks: attempts, and the first retry delay (doubled each time, capped).
FLEETS_WEBHOOK_MAX_ATTEMPTS = int(os.environ.get("FLEETS_WEBHOOK_MAX_ATTEMPTS", "8"))
FLEETS_WEBHOOK_BACKOFF_SECONDS = float(os.environ.get("FLEETS_WEBHOOK_BACKOFF_SECONDS", "10"))
FLEETS_WEBHOOK_BACKOFF_MAX_SECONDS = float(
    os.environ.get("FLEETS_WEBHOOK_BACKOFF_MAX_SECONDS", "3600")
)
FLEETS_WEBHOOK_TIMEOUT_SECONDS = float(os.environ.get("FLEETS_WEBHOOK_TIMEOUT_SECONDS", "10"))
# Plain-http webhook URLs (and loopback/private hosts) only when explicitly allowed (dev).
FLEETS_WEBHOOK_ALLOW_INSECURE = env_bool("FLEETS_WEBHOOK_ALLOW_INSECURE", DEBUG)
CELERY_BEAT_SCHEDULE["fleets-sweep"] = {
    "task": "fleets.tasks.dispatch_sweep",
    "schedule": float(FLEETS_SWEEP_INTERVAL_SECONDS),
}

# --- Object storage (S3 API) ------------------------------------------------------------------
# Embedded default: the local S3 server in local_s3/ (`make run` starts it on this port).
S3_ENDPOINT_URL = os.environ.get("S3_ENDPOINT_URL", "http://127.0.0.1:9000")
S3_BUCKET = os.environ.get("S3_BUCKET", "marketplace")
S3_REGION = os.environ.get("S3_REGION", "us-east-1")
AWS_ACCESS_KEY_ID = os.environ.get("AWS_ACCESS_KEY_ID", "local-key")
AWS_SECRET_ACCESS_KEY = os.environ.get("AWS_SECRET_ACCESS_KEY", "local-secret")
S3_UPLOAD_URL_EXPIRY_SECONDS = int(os.environ.get("S3_UPLOAD_URL_EXPIRY_SECONDS", "3600"))

# --- Episodes and QA ---------------------------------------------------------------------------
EPISODE_MAX_BYTES = int(os.environ.get("EPISODE_MAX_BYTES", str(5 * 1024**3)))
# Files this large or larger are uploaded in parts (presigned part URLs + complete).
EPISODE_MULTIPART_THRESHOLD_BYTES = int(
    os.environ.get("EPISODE_MULTIPART_THRESHOLD_BYTES", str(64 * 1024**2))
)
EPISODE_MULTIPART_PART_BYTES = int(
    os.environ.get("EPISODE_MULTIPART_PART_BYTES", str(16 * 1024**2))
)
EPISODE_MAX_FPS = int(os.environ.get("EPISODE_MAX_FPS", "1000"))
EPISODE_MIN_SECONDS = float(os.environ.get("EPISODE_MIN_SECONDS", "1"))
EPISODE_MAX_SECONDS = float(os.environ.get("EPISODE_MAX_SECONDS", "3600"))
# Uploaded episodes still undecided after this long get their QA queued again.
EPISODE_QA_STALE_SECONDS = int(os.environ.get("EPISODE_QA_STALE_SECONDS", "900"))
# QA's limits on one file, whatever it claims (datasets/qa_checks.py QALimits, qa_sandbox.py).
EPISODE_QA_MAX_FOOTER_BYTES = int(os.environ.get("EPISODE_QA_MAX_FOOTER_BYTES", str(1024**2)))
EPISODE_QA_MAX_ROW_GROUPS = int(os.environ.get("EPISODE_QA_MAX_ROW_GROUPS", "512"))
EPISODE_QA_MAX_COLUMNS = int(os.environ.get("EPISODE_QA_MAX_COLUMNS", "256"))
EPISODE_QA_MAX_DECODED_BYTES = int(os.environ.get("EPISODE_QA_MAX_DECODED_BYTES", str(1024**3)))
EPISODE_QA_BATCH_ROWS = int(os.environ.get("EPISODE_QA_BATCH_ROWS", "65536"))
EPISODE_QA_TIME_LIMIT_SECONDS = float(os.environ.get("EPISODE_QA_TIME_LIMIT_SECONDS", "300"))
EPISODE_QA_MEMORY_BYTES = int(os.environ.get("EPISODE_QA_MEMORY_BYTES", str(1024**3)))
EPISODE_QA_SANDBOX = env_bool("EPISODE_QA_SANDBOX", True)
# Video QA (issue 15): the longest black or frozen stretch a camera may show, what counts as
# black (mean luma, limited range: black is 16) and as frozen (mean absolute luma difference
# between consecutive frames, on a subsampled grid).
EPISODE_QA_VIDEO_MAX_STILL_SECONDS = float(
    os.environ.get("EPISODE_QA_VIDEO_MAX_STILL_SECONDS", "3")
)
EPISODE_QA_VIDEO_BLACK_LUMA = float(os.environ.get("EPISODE_QA_VIDEO_BLACK_LUMA", "24"))
# Exposure: a stretch over the same length darker (mean luma) than DARK or brighter than BRIGHT.
EPISODE_QA_VIDEO_DARK_LUMA = float(os.environ.get("EPISODE_QA_VIDEO_DARK_LUMA", "40"))
EPISODE_QA_VIDEO_BRIGHT_LUMA = float(os.environ.get("EPISODE_QA_VIDEO_BRIGHT_LUMA", "220"))
EPISODE_QA_VIDEO_FROZEN_DIFFERENCE = float(
    os.environ.get("EPISODE_QA_VIDEO_FROZEN_DIFFERENCE", "0.25")
)
# Video QA's bounds (issue 28): the largest resolution taken (also the decoder's pixel ceiling),
# and the CPU time decoding an episode's cameras may take: BASE plus PER_SECOND per second of
# its declared duration (two 640x480 H.264 cameras took 0.035 s per second in
# bench/ingest_bench.py; a hostile file is stopped there, within 0.5x its duration).
EPISODE_QA_VIDEO_MAX_WIDTH = int(os.environ.get("EPISODE_QA_VIDEO_MAX_WIDTH", "4096"))
EPISODE_QA_VIDEO_MAX_HEIGHT = int(os.environ.get("EPISODE_QA_VIDEO_MAX_HEIGHT", "4096"))
EPISODE_QA_VIDEO_CPU_SECONDS_BASE = float(os.environ.get("EPISODE_QA_VIDEO_CPU_SECONDS_BASE", "1"))
EPISODE_QA_VIDEO_CPU_SECONDS_PER_SECOND = float(
    os.environ.get("EPISODE_QA_VIDEO_CPU_SECONDS_PER_SECOND", "0.3")
)
# QA runs of one episode that may die unfinished (worker killed) before it is rejected.
EPISODE_QA_MAX_ATTEMPTS = int(os.environ.get("EPISODE_QA_MAX_ATTEMPTS", "3"))
# Content QA (datasets/qa_content.py; the limits per state element are the embodiment's, the
# rest apply to every embodiment; rules in datasets/README.md). Units: the state's (rad, m).
EPISODE_QA_CONTENT = env_bool("EPISODE_QA_CONTENT", True)
EPISODE_QA_LIMIT_TOLERANCE = float(os.environ.get("EPISODE_QA_LIMIT_TOLERANCE", "0.02"))
EPISODE_QA_MAX_SPEED = float(os.environ.get("EPISODE_QA_MAX_SPEED", "6.0"))  # per second
EPISODE_QA_JUMP_TOLERANCE = float(os.environ.get("EPISODE_QA_JUMP_TOLERANCE", "0.05"))
EPISODE_QA_IDLE_SPEED = float(os.environ.get("EPISODE_QA_IDLE_SPEED", "0.02"))  # per second
EPISODE_QA_MAX_IDLE_FRACTION = float(os.environ.get("EPISODE_QA_MAX_IDLE_FRACTION", "0.5"))
EPISODE_QA_IDLE_EDGE_FLAG_SECONDS = float(os.environ.get("EPISODE_QA_IDLE_EDGE_FLAG_SECONDS", "2"))
EPISODE_QA_FROZEN_EPSILON = float(os.environ.get("EPISODE_QA_FROZEN_EPSILON", "1e-6"))
EPISODE_QA_MIN_ACTION_CORRELATION = float(
    os.environ.get("EPISODE_QA_MIN_ACTION_CORRELATION", "0.5")
)
EPISODE_QA_MAX_ACTION_LAG_SECONDS = float(
    os.environ.get("EPISODE_QA_MAX_ACTION_LAG_SECONDS", "0.5")
)
EPISODE_QA_JERK_REFERENCE = float(os.environ.get("EPISODE_QA_JERK_REFERENCE", "10"))
# Near-duplicates of an accepted episode in another order are refused too (within the order
# always).
EPISODE_QA_PLATFORM_DUPLICATES = env_bool("EPISODE_QA_PLATFORM_DUPLICATES", True)
# Per-camera video fingerprints: a camera video already accepted, sent again under a new
# episode (over another trajectory), is refused near_duplicate too.
EPISODE_QA_VIDEO_DUPLICATES = env_bool("EPISODE_QA_VIDEO_DUPLICATES", True)
# The collection plan (issue 30): on an order asking for calibrated cameras, an episode's
# camera calibration older than this (or made before its scene was arranged) is stale.
CALIBRATION_MAX_AGE_DAYS = int(os.environ.get("CALIBRATION_MAX_AGE_DAYS", "30"))
# Operator outliers within an order (datasets/operator_figures.py): among operators with at
# least MIN_EPISODES checked episodes, flagged when the mean quality score is below RATIO x
# the order's median, or the acceptance rate more than GAP below the order's median.
# The customer may claim delivered episodes (re-collected or credited) for this many days after
# the order's first full delivery: one window per order, later versions do not restart it.
DELIVERY_ACCEPTANCE_DAYS = int(os.environ.get("DELIVERY_ACCEPTANCE_DAYS", "14"))
# Claims (datasets/services/claims.py): an episode's rejection is granted at once only while the
# customer's rejected share of the order (its exclusions during collection included) stays
# within this fraction of the order's accepted hours and the automatic re-check confirms it;
# anything else is a dispute its fleet may answer for DISPUTE_ANSWER_DAYS, then staff decide.
CLAIM_AUTO_GRANT_SHARE = Decimal(os.environ.get("CLAIM_AUTO_GRANT_SHARE", "0.10"))
DISPUTE_ANSWER_DAYS = int(os.environ.get("DISPUTE_ANSWER_DAYS", "5"))
# A claim still being re-checked this long after it was filed is re-checked again (beat).
CLAIM_RECHECK_STALE_SECONDS = int(os.environ.get("CLAIM_RECHECK_STALE_SECONDS", "600"))
OPERATOR_OUTLIER_MIN_EPISODES = int(os.environ.get("OPERATOR_OUTLIER_MIN_EPISODES", "3"))
OPERATOR_OUTLIER_QUALITY_RATIO = float(os.environ.get("OPERATOR_OUTLIER_QUALITY_RATIO", "0.8"))
OPERATOR_OUTLIER_ACCEPTANCE_GAP = float(os.environ.get("OPERATOR_OUTLIER_ACCEPTANCE_GAP", "0.2"))
# Registered episodes whose upload never completed are rejected (and a multipart upload
# aborted) this long after their last upload URL expired.
EPISODE_UPLOAD_ABANDONED_SECONDS = int(os.environ.get("EPISODE_UPLOAD_ABANDONED_SECONDS", "3600"))
# Deliveries: data files roll over at this size; signed download links live this long.
DELIVERY_DATA_FILE_BYTES = int(os.environ.get("DELIVERY_DATA_FILE_BYTES", str(100 * 1024**2)))
# Camera videos: each camera's episodes concatenated per file up to this (lerobot's 200 MB).
DELIVERY_VIDEO_FILE_BYTES = int(os.environ.get("DELIVERY_VIDEO_FILE_BYTES", str(200 * 1024**2)))
DELIVERY_LINK_EXPIRY_SECONDS = int(os.environ.get("DELIVERY_LINK_EXPIRY_SECONDS", "300"))
# The catalog and rate cards the quote and order paths read are kept per process
# (orders/catalog.py): reloaded on any change seen through the shared cache, and at the latest
# after this many seconds (the staleness bound for other processes without REDIS_URL).
CATALOG_CACHE_SECONDS = int(os.environ.get("CATALOG_CACHE_SECONDS", "30"))
# API keys that authenticated are kept per process this long (marketplace/api_key_cache.py):
# with REDIS_URL, the key and its organization, dropped by every process on any revocation;
# without it, only the organization (the key's row, revoked_at included, is read each time).
API_KEY_CACHE_SECONDS = int(os.environ.get("API_KEY_CACHE_SECONDS", "30"))
# The order page's camera clips: each play is a fresh, audited, short-lived link.
EPISODE_MEDIA_LINK_SECONDS = int(os.environ.get("EPISODE_MEDIA_LINK_SECONDS", "120"))
CELERY_BEAT_SCHEDULE["datasets-qa-sweep"] = {"task": "datasets.tasks.qa_sweep", "schedule": 300.0}
# Deliveries still assembling this long after they were opened get their assembly queued again.
DELIVERY_ASSEMBLY_STALE_SECONDS = int(os.environ.get("DELIVERY_ASSEMBLY_STALE_SECONDS", "1800"))
# delivery_sweep sends a missed ready email / customer webhook only this long after ready.
DELIVERY_NOTIFY_WITHIN_SECONDS = int(os.environ.get("DELIVERY_NOTIFY_WITHIN_SECONDS", "172800"))
CELERY_BEAT_SCHEDULE["datasets-delivery-sweep"] = {
    "task": "datasets.tasks.delivery_sweep",
    "schedule": 600.0,
}
CELERY_BEAT_SCHEDULE["datasets-claims-sweep"] = {
    "task": "datasets.tasks.claims_sweep",
    "schedule": 300.0,
}

# --- Billing (Stripe) -------------------------------------------------------------------------
# No STRIPE_API_KEY: online payment is off and staff mark orders paid (admin action).
STRIPE_API_KEY = os.environ.get("STRIPE_API_KEY", "")
STRIPE_WEBHOOK_SECRET = os.environ.get("STRIPE_WEBHOOK_SECRET", "")
STRIPE_API_BASE = os.environ.get("STRIPE_API_BASE") or None  # None: the real Stripe API
STRIPE_MAX_NETWORK_RETRIES = int(os.environ.get("STRIPE_MAX_NETWORK_RETRIES", "2"))
STRIPE_TIMEOUT_SECONDS = float(os.environ.get("STRIPE_TIMEOUT_SECONDS", "20"))
STRIPE_WEBHOOK_TOLERANCE_SECONDS = int(os.environ.get("STRIPE_WEBHOOK_TOLERANCE_SECONDS", "300"))
BILLING_SITE_URL = os.environ.get("BILLING_SITE_URL", "http://127.0.0.1:8000").rstrip("/")
BILLING_CHECKOUT_SUCCESS_URL = os.environ.get(
    "BILLING_CHECKOUT_SUCCESS_URL", BILLING_SITE_URL + "/orders/{order_id}/?payment=success"
)
BILLING_CHECKOUT_CANCEL_URL = os.environ.get(
    "BILLING_CHECKOUT_CANCEL_URL", BILLING_SITE_URL + "/orders/{order_id}/?payment=cancelled"
)
CELERY_BEAT_SCHEDULE["billing-sweep"] = {"task": "billing.tasks.billing_sweep", "schedule": 300.0}
# Fleet payouts: on the 1st of each month (UTC); staff can also run them from the admin.
from celery.schedules import crontab  # noqa: E402  (kept inside the billing block)

BILLING_PAYOUT_CRONTAB = {
    "minute": os.environ.get("BILLING_PAYOUT_MINUTE", "0"),
    "hour": os.environ.get("BILLING_PAYOUT_HOUR", "6"),
    "day_of_month": os.environ.get("BILLING_PAYOUT_DAY_OF_MONTH", "1"),
}
CELERY_BEAT_SCHEDULE["billing-payouts"] = {
    "task": "billing.tasks.payout_run",
    "schedule": crontab(**BILLING_PAYOUT_CRONTAB),
}

# --- Portals (issue 18): downloads, exports, the live order page, invoices ------------------------
# A whole delivery as one streamed tar file: offered up to this size (bigger: the command).
DELIVERY_ARCHIVE_MAX_BYTES = int(os.environ.get("DELIVERY_ARCHIVE_MAX_BYTES", str(2 * 1024**3)))
# Deliveries copied into a customer's own bucket: S3 endpoints customers may name besides AWS
# (comma-separated, exact scheme://host:port), so a customer cannot aim the platform at an
# internal address. Empty: AWS S3 only.
DELIVERY_EXPORT_ENDPOINTS = env_list("DELIVERY_EXPORT_ENDPOINTS", "")
# How often the order page asks for fresh figures while collection runs.
ORDER_PAGE_POLL_SECONDS = int(os.environ.get("ORDER_PAGE_POLL_SECONDS", "5"))
# Invoices: who bills, and where bank transfers go (printed on every invoice).
BILLING_SELLER_NAME = os.environ.get("BILLING_SELLER_NAME", "Motion Dataset Marketplace Ltd")
BILLING_SELLER_ADDRESS = os.environ.get(
    "BILLING_SELLER_ADDRESS", "1 Example Street, 10115 Berlin, Germany"
)
BILLING_SELLER_TAX_ID = os.environ.get("BILLING_SELLER_TAX_ID", "DE000000000")
BILLING_TAX_RATE_PERCENT = os.environ.get("BILLING_TAX_RATE_PERCENT", "0")
BILLING_TAX_NOTE = os.environ.get(
    "BILLING_TAX_NOTE", "Prices include tax where it applies; reverse charge for B2B in the EU."
)
BILLING_BANK_ACCOUNT_NAME = os.environ.get("BILLING_BANK_ACCOUNT_NAME", BILLING_SELLER_NAME)
BILLING_BANK_IBAN = os.environ.get("BILLING_BANK_IBAN", "DE00 0000 0000 0000 0000 00")
BILLING_BANK_BIC = os.environ.get("BILLING_BANK_BIC", "XXXXDEXXXXX")
BILLING_INVOICE_DUE_DAYS = int(os.environ.get("BILLING_INVOICE_DUE_DAYS", "14"))
