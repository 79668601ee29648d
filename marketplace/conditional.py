"""Conditional GETs: an ETag made from the body itself, and 304 Not Modified when the client
already holds it (`If-None-Match`). Hashing the body (with the caller's organization) means the
ETag changes whenever anything in the body changes, and two organizations never share one;
the body is still built, but not sent again."""

import hashlib

import orjson
from django.utils.http import parse_etags
from rest_framework import status
from rest_framework.response import Response


def etag_for(body, *, organization_id) -> str:
    digest = hashlib.blake2b(digest_size=16)
    digest.update(str(organization_id).encode())
    digest.update(orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS, default=str))
    return f'"{digest.hexdigest()}"'


def conditional_response(request, body, *, organization_id) -> Response:
    """200 with the body and its ETag, or 304 (no body) when If-None-Match names that ETag."""
    etag = etag_for(body, organization_id=organization_id)
    held = parse_etags(request.headers.get("If-None-Match", ""))
    # weak comparison, as RFC 9110 wants for If-None-Match
    if "*" in held or etag in {tag.removeprefix("W/") for tag in held}:
        response = Response(status=status.HTTP_304_NOT_MODIFIED)
    else:
        response = Response(body)
    response["ETag"] = etag
    # only the caller's own client may keep it, and must ask again before using it
    response["Cache-Control"] = "private, no-cache"
    response["Vary"] = "Authorization, Cookie, X-Organization"
    return response
