"""The caller's network address, as far as it can be trusted.

Behind API_NUM_PROXIES trusted reverse proxies, each of which appends the address it saw to
X-Forwarded-For, the client is the entry that many places from the right; everything left of
it was written by the client and proves nothing. With no proxy (the default), only the
socket's REMOTE_ADDR counts. Throttles, the login lockout and download audit use this.
"""

import ipaddress

from django.conf import settings


def client_address(request) -> str | None:
    remote = request.META.get("REMOTE_ADDR") or None
    proxies = settings.API_NUM_PROXIES
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies <= 0 or not forwarded:
        return remote
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    if not hops:
        return remote
    candidate = hops[-min(proxies, len(hops))]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote
