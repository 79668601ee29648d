"""A Celery app for crash tests (`celery -A tests.celery_slow_dispatch worker`): the platform's
app, with every dispatch holding its transaction open TEST_DISPATCH_DELAY_SECONDS inside the
candidate search, so a SIGKILL lands mid-dispatch. Test-only; production code has no hook."""

import os
import time

import django

from marketplace.celery import app  # noqa: F401 (the app this module serves to `celery -A`)

django.setup()

from fleets import selectors  # noqa: E402

DELAY_SECONDS = float(os.environ.get("TEST_DISPATCH_DELAY_SECONDS", "0.25"))
_candidates = selectors.dispatch_candidates


def _slow_candidates(*args, **kwargs):
    time.sleep(DELAY_SECONDS)
    return _candidates(*args, **kwargs)


selectors.dispatch_candidates = _slow_candidates
_batch_candidates = selectors.batch_candidates


def _slow_batch_candidates(*args, **kwargs):
    time.sleep(DELAY_SECONDS)
    return _batch_candidates(*args, **kwargs)


selectors.batch_candidates = _slow_batch_candidates
