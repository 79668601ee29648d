"""The Celery application. Tasks live in each app's tasks.py and take ids, never objects."""

import os

from celery import Celery
from kombu.transport import TRANSPORT_ALIASES

# `filesystem://` (the embedded broker) is kombu's transport with atomic files (broker.py).
TRANSPORT_ALIASES["filesystem"] = "marketplace.broker:Transport"

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings")

app = Celery("marketplace")
app.config_from_object("django.conf:settings", namespace="CELERY")
# One queue per kind of work, so each can get its own worker processes in production.
app.conf.task_routes = {
    # Webhooks to fleets and customers have their own queue (and workers, in production): a
    # slow receiver never delays dispatch, QA or deliveries. First match wins.
    "fleets.tasks.webhook_deliver": {"queue": "webhooks"},
    "marketplace.tasks.*": {"queue": "webhooks"},
    "fleets.tasks.*": {"queue": "dispatch"},
    "datasets.tasks.qa_*": {"queue": "qa"},
    "datasets.tasks.delivery_*": {"queue": "delivery"},
    "billing.tasks.*": {"queue": "billing"},
}
app.autodiscover_tasks()

# Request ids travel from web requests into task logs (signal handlers connect on import).
import marketplace.observability  # noqa: E402, F401
