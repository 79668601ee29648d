"""The one error shape of the API, and the errors services raise.

Every 4xx the API answers looks like
    {"code": "invalid", "message": "Human readable summary.", "fields": {"hours": ["..."]}}
`fields` is present (possibly empty) on every error so clients can rely on it.
The DRF side (turning exceptions into that shape) is in marketplace/exception_handler.py.
"""

from rest_framework import status

from marketplace.error_codes import ErrorCode


class ServiceError(Exception):
    """A business rule refused an operation. Services raise it; the API turns it into a 4xx."""

    status_code = status.HTTP_400_BAD_REQUEST
    code = ErrorCode.INVALID

    def __init__(self, message: str, *, code: str | None = None, fields: dict | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.fields = fields or {}


class Conflict(ServiceError):
    """The request is valid but the object's current state does not allow it."""

    status_code = status.HTTP_409_CONFLICT
    code = ErrorCode.CONFLICT


class NotFound(ServiceError):
    status_code = status.HTTP_404_NOT_FOUND
    code = ErrorCode.NOT_FOUND


class ServiceUnavailable(ServiceError):
    """A system we depend on (storage, broker, database) cannot be reached: try again later."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    code = ErrorCode.SERVICE_UNAVAILABLE


def invalid(field_name: str, message: str, code: str = ErrorCode.INVALID) -> ServiceError:
    """A 400 about one input field: the message is also the field's error."""
    return ServiceError(message, code=code, fields={field_name: [message]})


def error_body(code: str, message: str, fields: dict | None = None) -> dict:
    return {"code": code, "message": message, "fields": fields or {}}
