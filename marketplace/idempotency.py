"""`Idempotency-Key` on POSTs that create or pay: a retry gets the first response back.

The key row is inserted in the same transaction as the work it guards. A concurrent retry
blocks on the unique index until the first commits, then reads the stored response; if the
first fails, its row rolls back with it and the retry runs afresh.
"""

import hashlib
import json
from collections.abc import Callable

from django.db import connection, transaction
from django.utils import timezone
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
        record, created = _claim(
            organization=organization, scope=scope, key=key, fingerprint=fingerprint
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


def _claim(*, organization: Organization, scope: str, key: str, fingerprint: str):
    """(the key's row, whether this call created it). A new key costs one statement,
    `INSERT ... ON CONFLICT DO NOTHING RETURNING id` (get_or_create takes a SELECT, a savepoint,
    the INSERT and a release); a key already taken is read after. On a concurrent first use
    the INSERT waits on the unique index like get_or_create's, then finds the row committed."""
    field = IdempotencyKey._meta.get_field
    now = timezone.now()
    values = [
        field("organization").get_db_prep_value(organization.pk, connection),
        scope,
        key,
        fingerprint,
        field("created_at").get_db_prep_value(now, connection),
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f'INSERT INTO "{IdempotencyKey._meta.db_table}"'  # noqa: S608 - the model's table
            ' ("organization_id", "scope", "key", "request_fingerprint", "created_at")'
            " VALUES (%s, %s, %s, %s, %s)"
            ' ON CONFLICT ("organization_id", "scope", "key") DO NOTHING RETURNING "id"',
            values,
        )
        inserted = cursor.fetchone()
    if inserted is None:
        return IdempotencyKey.objects.get(organization=organization, scope=scope, key=key), False
    record = IdempotencyKey(
        id=inserted[0],
        organization=organization,
        scope=scope,
        key=key,
        request_fingerprint=fingerprint,
        created_at=now,
    )
    record._state.adding = False
    record._state.db = connection.alias
    return record, True
