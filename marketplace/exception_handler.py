"""DRF's EXCEPTION_HANDLER and Django's API error views: every error in the one shape."""

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import InterfaceError as DatabaseInterfaceError
from django.db import OperationalError as DatabaseOperationalError
from django.http import Http404, JsonResponse
from kombu.exceptions import OperationalError as BrokerUnreachable
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from marketplace.error_codes import ErrorCode
from marketplace.errors import ServiceError, error_body

logger = logging.getLogger(__name__)

_DRF_CODES = {
    exceptions.ParseError: ErrorCode.MALFORMED_REQUEST,
    exceptions.NotAuthenticated: ErrorCode.NOT_AUTHENTICATED,
    exceptions.AuthenticationFailed: ErrorCode.AUTHENTICATION_FAILED,
    exceptions.PermissionDenied: ErrorCode.PERMISSION_DENIED,
    exceptions.NotFound: ErrorCode.NOT_FOUND,
    exceptions.MethodNotAllowed: ErrorCode.METHOD_NOT_ALLOWED,
    exceptions.NotAcceptable: ErrorCode.NOT_ACCEPTABLE,
    exceptions.UnsupportedMediaType: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    exceptions.Throttled: ErrorCode.THROTTLED,
    exceptions.ValidationError: ErrorCode.INVALID,
}


def _as_field_errors(detail) -> dict:
    """DRF's nested ValidationError detail -> {field: [messages]} (nested dicts kept)."""
    if isinstance(detail, dict):
        return {str(key): _as_field_messages(value) for key, value in detail.items()}
    return {"non_field_errors": _as_field_messages(detail)}


def _as_field_messages(value):
    if isinstance(value, dict):
        return {str(key): _as_field_messages(inner) for key, inner in value.items()}
    if isinstance(value, list):
        if all(not isinstance(item, dict | list) for item in value):
            return [str(item) for item in value]
        return {str(index): _as_field_messages(item) for index, item in enumerate(value) if item}
    return [str(value)]


def _first_message(fields: dict) -> str:
    for key, value in fields.items():
        if isinstance(value, dict):
            return _first_message(value)
        if value:
            prefix = "" if key == "non_field_errors" else f"{key}: "
            return f"{prefix}{value[0]}"
    return "The request is invalid."


UNAVAILABLE = {
    # A connection lost mid-request (the next request reconnects: CONN_HEALTH_CHECKS).
    DatabaseOperationalError: (ErrorCode.DATABASE_UNAVAILABLE, "The database"),
    DatabaseInterfaceError: (ErrorCode.DATABASE_UNAVAILABLE, "The database"),
    BrokerUnreachable: (ErrorCode.BROKER_UNAVAILABLE, "The task queue"),
}


def api_exception_handler(exc, context):
    """DRF's EXCEPTION_HANDLER: every error leaves in the one shape."""
    for cls, (code, what) in UNAVAILABLE.items():
        if isinstance(exc, cls):
            logger.warning("503 %s: %r", code, exc)
            body = error_body(code, f"{what} cannot be reached right now; try again shortly.")
            return Response(body, status=503, headers={"Retry-After": "5"})
    if isinstance(exc, ServiceError):
        return Response(error_body(exc.code, exc.message, exc.fields), status=exc.status_code)
    if isinstance(exc, DjangoValidationError):
        fields = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(fields)
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()

    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a real bug: let Django log it and answer 500
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), ErrorCode.ERROR)
    if isinstance(exc, exceptions.ValidationError):
        fields = _as_field_errors(exc.detail)
        body = error_body(code, _first_message(fields), fields)
    else:
        detail = exc.detail if isinstance(exc, exceptions.APIException) else str(exc)
        body = error_body(code, str(detail))
    response.data = body
    return response


def json_error_view(status_code: int, code: str, message: str):
    def view(request, exception=None):
        return JsonResponse(error_body(code, message), status=status_code)

    return view


handler_404_api = json_error_view(404, ErrorCode.NOT_FOUND, "Not found.")
handler_500_api = json_error_view(500, ErrorCode.SERVER_ERROR, "Internal server error.")
