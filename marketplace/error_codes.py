"""The error codes the API answers in `{"code", "message", "fields"}`: data, not strings
scattered over the code. Each app lists its own in its `error_codes.py` (a TextChoices whose
label says what the code means) and registers them here; the OpenAPI schema documents every
registered code (marketplace.schema), and a test keeps code and registry in step.
"""

from django.db import models

REGISTRY: dict[str, str] = {}  # code -> what it means


def register(codes: type[models.TextChoices]) -> type[models.TextChoices]:
    """Add an app's codes to the registry (a code may be shared by apps: first label wins)."""
    for member in codes:
        REGISTRY.setdefault(member.value, member.label)
    return codes


@register
class ErrorCode(models.TextChoices):
    """Codes any endpoint may answer (request shape, authentication, the platform itself)."""

    INVALID = "invalid", "The input is invalid; `fields` says where."
    MALFORMED_REQUEST = "malformed_request", "The body is not valid JSON or not an object."
    NOT_AUTHENTICATED = "not_authenticated", "No credentials were given."
    AUTHENTICATION_FAILED = "authentication_failed", "The API key or session is not valid."
    PERMISSION_DENIED = "permission_denied", "The caller's organization or role may not do this."
    NOT_FOUND = "not_found", "No such object for this caller."
    METHOD_NOT_ALLOWED = "method_not_allowed", "This endpoint does not take this method."
    NOT_ACCEPTABLE = "not_acceptable", "No response format matches the Accept header."
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type", "The body is not JSON."
    PAYLOAD_TOO_LARGE = "payload_too_large", "The request body is larger than accepted."
    THROTTLED = "throttled", "Too many requests; retry after `Retry-After` seconds."
    CONFLICT = "conflict", "The object's current state does not allow this."
    SERVICE_UNAVAILABLE = "service_unavailable", "A system the platform depends on is down."
    DATABASE_UNAVAILABLE = "database_unavailable", "The database cannot be reached; retry."
    BROKER_UNAVAILABLE = "broker_unavailable", "The task queue cannot be reached; retry."
    SERVER_ERROR = "server_error", "An unexpected error on our side (a bug)."
    ERROR = "error", "Another error the framework reported."
    INVALID_IDEMPOTENCY_KEY = "invalid_idempotency_key", "The Idempotency-Key header is invalid."
    IDEMPOTENCY_KEY_REUSED = (
        "idempotency_key_reused",
        "This Idempotency-Key was used with another request body.",
    )
    INVALID_WEBHOOK_URL = "invalid_webhook_url", "The webhook URL is not an allowed receiver."
    SIGNUP_REFUSED = "signup_refused", "The account could not be created."
    ALREADY_REVOKED = "already_revoked", "The API key is already revoked."
