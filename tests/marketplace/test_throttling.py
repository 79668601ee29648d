"""marketplace.throttling: DRF's sliding window, keyed by who calls (API key, user, or
address); an anonymous caller on a public endpoint is counted once, at the anonymous rate."""

import time

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.cache import cache
from rest_framework.test import APIRequestFactory

from marketplace.throttling import (
    AnonRateThrottle,
    CallerRateThrottle,
    IdentifiedCallerRateThrottle,
)


def anonymous_request(address="203.0.113.7"):
    request = APIRequestFactory().post("/api/v1/quotes", REMOTE_ADDR=address)
    request.user = AnonymousUser()
    return request


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


def test_the_window_refuses_past_the_rate_and_advises_drfs_wait():
    clock = Clock()
    throttle = type("T", (AnonRateThrottle,), {"rate": "3/minute", "timer": clock})
    request = anonymous_request()
    for _ in range(3):
        clock.now += 1
        assert throttle().allow_request(request, None)
    # the fourth within the minute is refused, with DRF's wait: 58 s until the oldest leaves
    clock.now += 1
    refused = throttle()
    assert refused.allow_request(request, None) is False
    assert refused.wait() == pytest.approx((60 - 3) / 1)
    # once the oldest has left the window, one more is allowed
    clock.now += 58
    assert throttle().allow_request(request, None) is True


def test_caller_throttle_keys_anonymous_callers_by_address():
    clock = Clock()
    caller = type("Caller", (CallerRateThrottle,), {"rate": "2/minute", "timer": clock})
    here, there = anonymous_request("198.51.100.1"), anonymous_request("198.51.100.2")
    assert [caller().allow_request(here, None) for _ in range(3)] == [True, True, False]
    assert caller().allow_request(there, None) is True


def test_a_throttle_given_its_own_cache_keeps_its_history_there():
    from django.core.cache.backends.locmem import LocMemCache

    own = LocMemCache("throttle-test", {})
    clock = Clock()
    throttle = type("Own", (AnonRateThrottle,), {"rate": "2/minute", "timer": clock, "cache": own})
    assert throttle().allow_request(anonymous_request(), None)
    assert own.get("throttles:anon:203.0.113.7") is not None
    assert cache.get("throttles:anon:203.0.113.7") is None


# --- Endpoints open to anyone: one throttle check per request --------------------------------


@pytest.mark.django_db
def test_an_anonymous_caller_is_counted_once_at_the_anonymous_rate(anon_client):
    from tests.orders.test_quotes_api import SPEC

    # when an anonymous caller asks for a quote
    assert anon_client.post("/api/v1/quotes", SPEC, format="json").status_code == 201
    # then its address has an anonymous history of one request and no per-caller history
    assert len(cache.get("throttles:anon:127.0.0.1")) == 1
    assert cache.get("throttles:user:127.0.0.1") is None


@pytest.mark.django_db
def test_a_caller_with_a_key_is_counted_per_key_at_the_per_caller_rate(customer):
    from tests.orders.test_quotes_api import SPEC

    key = f"throttles:user:key-{customer.api_key.pk}"
    # given 60 quotes by this key in the last minute (the anonymous rate's limit)
    cache.set(key, [time.time()] * 60, 60)
    # when it asks for one more, it gets it: a key is counted at the per-caller rate...
    assert customer.client.post("/api/v1/quotes", SPEC, format="json").status_code == 201
    assert len(cache.get(key)) == 61
    # ...and never by its address at the anonymous rate
    assert cache.get("throttles:anon:127.0.0.1") is None
    # given 1,200 in the last minute (the per-caller limit), the next is refused
    cache.set(key, [time.time()] * 1200, 60)
    response = customer.client.post("/api/v1/quotes", SPEC, format="json")
    assert response.status_code == 429 and response.json()["code"] == "throttled"


def test_the_identified_caller_throttle_lets_anonymous_callers_to_the_anonymous_one():
    clock = Clock()
    identified = type(
        "Identified", (IdentifiedCallerRateThrottle,), {"rate": "1/minute", "timer": clock}
    )
    request = anonymous_request()
    assert [identified().allow_request(request, None) for _ in range(3)] == [True] * 3
    assert cache.get("throttles:user:203.0.113.7") is None


@pytest.mark.django_db
def test_a_history_the_previous_release_packed_into_drfs_key_breaks_nothing(anon_client):
    from tests.orders.test_quotes_api import SPEC

    # given what the release before kept in Redis under DRF's key: packed doubles, not a list
    cache.set("throttle_anon_127.0.0.1", b"\x00" * 16, 60)
    # when an anonymous caller asks for a quote, then it gets it, counted under its own key
    assert anon_client.post("/api/v1/quotes", SPEC, format="json").status_code == 201
    assert len(cache.get("throttles:anon:127.0.0.1")) == 1
