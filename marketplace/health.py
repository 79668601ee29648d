"""Liveness and readiness probes for load balancers and orchestrators.

/healthz: the process answers (no dependencies checked).
/readyz:  the database, the Celery broker and object storage all answer; 503 if any does not.
"""

import time

from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET


def _check_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _check_broker() -> None:
    from marketplace.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)


def _check_storage() -> None:
    from datasets import storage

    storage.client().head_bucket(Bucket=storage.bucket())


CHECKS = {"database": _check_database, "broker": _check_broker, "storage": _check_storage}


@never_cache
@require_GET
def healthz(request):
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request):
    results, ready = {}, True
    for name, check in CHECKS.items():
        started = time.perf_counter()
        try:
            check()
        except Exception as exc:
            ready = False
            results[name] = {"ok": False, "error": f"{exc.__class__.__name__}: {exc}"[:300]}
        else:
            results[name] = {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 1)}
    if not (settings.DEBUG or request.user.is_staff):
        for result in results.values():  # error texts may name hosts: staff only
            result.pop("error", None)
    body = {"status": "ready" if ready else "not_ready", "checks": results}
    return JsonResponse(body, status=200 if ready else 503)
