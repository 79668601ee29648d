"""Bounds on API request bodies, checked before any parser runs, answered in the error shape.

- A body larger than DATA_UPLOAD_MAX_MEMORY_SIZE (API_MAX_BODY_BYTES) answers 413
  `payload_too_large` (Django alone would answer an HTML 400 page).
- JSON nested deeper than API_MAX_JSON_DEPTH answers 400 `malformed_request` (parsing and
  validating it recursively would otherwise end in a RecursionError: a 500). The depth is
  measured on the raw bytes with string literals removed, in C and numpy: a few milliseconds
  for the largest body allowed. A body with no more brackets than the limit (brackets in
  strings counted too) cannot nest deeper, and is not measured.
"""

import re

import numpy as np
from django.conf import settings
from django.http import JsonResponse

from marketplace.error_codes import ErrorCode
from marketplace.errors import error_body

GUARDED_PREFIXES = ("/api/", "/billing/stripe/webhook/")
JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
OPENERS = np.zeros(256, dtype=np.int8)
OPENERS[[ord("["), ord("{")]] = 1
OPENERS[[ord("]"), ord("}")]] = -1


def json_depth(body: bytes) -> int:
    """How deep arrays and objects nest in a JSON text (0 for a scalar)."""
    structure = JSON_STRING.sub(b'""', body)
    if not structure:
        return 0
    steps = OPENERS[np.frombuffer(structure, dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


class ApiRequestLimitsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith(GUARDED_PREFIXES):
            refused = self._refusal(request)
            if refused is not None:
                return refused
        return self.get_response(request)

    @staticmethod
    def _refusal(request):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if limit is not None and length > limit:
            return JsonResponse(
                error_body(
                    ErrorCode.PAYLOAD_TOO_LARGE,
                    f"The request body has {length} bytes; at most {limit} are accepted.",
                ),
                status=413,
            )
        if length and "json" in request.META.get("CONTENT_TYPE", ""):
            body, most = request.body, settings.API_MAX_JSON_DEPTH
            if body.count(b"[") + body.count(b"{") <= most:
                return None  # fewer openers than the limit: no deeper than it
            depth = json_depth(body)
            if depth > most:
                return JsonResponse(
                    error_body(
                        ErrorCode.MALFORMED_REQUEST,
                        f"JSON nested {depth} levels deep; at most {most} are accepted.",
                    ),
                    status=400,
                )
        return None
