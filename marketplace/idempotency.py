"""`Idempotency-Key` on POSTs that create or pay: a retry gets the first response back.

The key row is inserted in the same transaction as the work it guards. A concurrent retry
blocks on the unique index until the first commits, then reads the stored response; if the
first fails, its row rolls back with it and the retry runs afresh.
"""

import hashlib
import json
from collections.abc import Callable

from django.db import transaction
from rest_framework.response import Response

from marketplace.error_codes import ErrorCode
from marketplace.errors import Conflict, ServiceError
from marketplace.models import IdempotencyKey, Organization

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255


def request_fingerprint(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def idempotent_response(
    *,
    request,
    organization: Organization,
    scope: str,
    handler: Callable[[], Response],
) -> Response:
    """Run `handler` once per (organization, scope, key); replay its response afterwards."""
    key = request.headers.get(HEADER)
    if key is None:
        return handler()
    key = key.strip()
    # Printable only: a NUL byte cannot be stored in PostgreSQL text (it was a 500).
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise ServiceError(
            f"{HEADER} must be 1 to {MAX_KEY_LENGTH} printable characters.",
            code=ErrorCode.INVALID_IDEMPOTENCY_KEY,
        )
    fingerprint = request_fingerprint(request.data)
    with transaction.atomic():
        record, created = IdempotencyKey.objects.get_or_create(
            organization=organization,
            scope=scope,
            key=key,
            defaults={"request_fingerprint": fingerprint},
        )
        if not created:
            if record.request_fingerprint != fingerprint:
                raise Conflict(
                    f"This {HEADER} was already used with a different request body.",
                    code=ErrorCode.IDEMPOTENCY_KEY_REUSED,
                )
            response = Response(record.response_body, status=record.response_status)
            response["Idempotent-Replayed"] = "true"
            return response
        response = handler()
        if response.status_code >= 400:
            # Errors are not remembered: roll back the key so a corrected retry can proceed.
            transaction.set_rollback(True)
            return response
        record.response_status = response.status_code
        record.response_body = json.loads(json.dumps(response.data, default=str))
        record.save(update_fields=["response_status", "response_body"])
    return response
