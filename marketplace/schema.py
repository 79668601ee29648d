"""drf-spectacular extensions: the API key scheme, and the error responses every view can give.

Every 4xx leaves in one shape (marketplace/errors.py); the AutoSchema below documents it on each
operation for the statuses that operation can really answer, so clients (and schemathesis)
can rely on the schema for errors as well as for successes.
"""

from django.utils.module_loading import autodiscover_modules
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import AllowAny

from marketplace.error_codes import REGISTRY


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "marketplace.authentication.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An organization API key: `Authorization: Bearer mk_<prefix>_<secret>`.",
        }


class ErrorSerializer(serializers.Serializer):
    """The one error shape: `{"code", "message", "fields"}`."""

    code = serializers.CharField(help_text="Machine-readable (the enum lists every code).")
    message = serializers.CharField(help_text="A human-readable summary.")
    fields = serializers.DictField(
        help_text="Per-field messages (`{field: [message, ...]}`, nested for nested input); "
        "empty when the error is not about a field."
    )

    class Meta:
        ref_name = "Error"


ERROR_DESCRIPTIONS = {
    400: "The request is invalid (see `fields`).",
    401: "No valid credentials: a missing, malformed, unknown or revoked API key.",
    403: "The caller may not do this (organization kind or role, or a missing CSRF token).",
    404: "No such object for this caller (other organizations' objects are not found), "
    "whether named in the path or in the body, or an invalid page cursor.",
    409: "The object's current state does not allow this, or the Idempotency-Key was used "
    "with another body.",
    413: "The body is larger than the API accepts (`payload_too_large`).",
    415: "The body is not JSON.",
    429: "Too many requests: retry after the `Retry-After` header's seconds.",
}

UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's AutoSchema plus the error responses each operation can answer."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        for status_code in self._error_statuses():
            responses.setdefault(
                str(status_code),
                self._get_response_for_code(
                    OpenApiResponse(ErrorSerializer, description=ERROR_DESCRIPTIONS[status_code]),
                    str(status_code),
                    direction=direction,
                ),
            )
        return responses

    def _error_statuses(self) -> list[int]:
        view = self.view
        has_body = self.method in ("POST", "PUT", "PATCH")
        public = all(isinstance(p, AllowAny) for p in view.get_permissions())
        paginated = self._is_list_view() and getattr(view, "pagination_class", None) is not None
        has_query = bool(self._get_filter_parameters() or self._get_pagination_parameters())
        statuses = [401]  # a bad API key is refused even where anonymous callers are welcome
        if has_body or has_query:
            statuses.append(400)
        if not public or self.method in UNSAFE_METHODS:
            statuses.append(403)  # writes by session need the CSRF token
        if "{" in self.path or paginated or has_body:
            statuses.append(404)  # a body can name objects too (a fleet, a quote, a site)
        if self.method in UNSAFE_METHODS:
            statuses.append(409)
        if has_body:
            statuses.extend([413, 415])
        if view.get_throttles():
            statuses.append(429)
        return sorted(statuses)


def document_error_codes(result, generator, request, public):
    """POSTPROCESSING_HOOKS entry: the Error component's `code` lists every registered code,
    each with what it means, so clients can switch on codes the schema promises."""
    autodiscover_modules("error_codes")
    codes = dict(sorted(REGISTRY.items()))
    error = result.get("components", {}).get("schemas", {}).get("Error")
    if error is not None:
        error["properties"]["code"] = {
            "type": "string",
            "enum": list(codes),
            "description": "Machine-readable; one of:\n\n"
            + "\n".join(f"- `{code}`: {meaning}" for code, meaning in codes.items()),
        }
    return result
