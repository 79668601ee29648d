"""marketplace.throttling: DRF's sliding window exactly (decisions and wait()), its history
kept in the cache as packed doubles; a history DRF stored as a list still counts."""

import random
import time
from array import array

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.cache import cache
from rest_framework.test import APIRequestFactory
from rest_framework.throttling import AnonRateThrottle as DrfAnonRateThrottle

from marketplace.throttling import (
    AnonRateThrottle,
    CallerRateThrottle,
    IdentifiedCallerRateThrottle,
    history_of,
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


def throttles(rate: str, clock: Clock):
    """Ours and DRF's, same rate, same clock, separate keys."""
    ours = type("Ours", (AnonRateThrottle,), {"rate": rate, "timer": clock, "scope": "t-ours"})
    drf = type(
        "Drf",
        (DrfAnonRateThrottle,),
        {"rate": rate, "timer": clock, "scope": "t-drf", "get_ident": AnonRateThrottle.get_ident},
    )
    return ours, drf


@pytest.mark.parametrize("rate", ["5/second", "60/minute", "3/minute"])
def test_decisions_and_waits_are_drfs(rate):
    # given ours and DRF's throttle on the same clock
    clock = Clock()
    ours, drf = throttles(rate, clock)
    request = anonymous_request()
    rng = random.Random(rate)
    for _ in range(400):
        # when requests come at random moments (bursts and pauses)
        clock.now += rng.choice([0.0, 0.001, 0.05, 0.3, 1.0, 7.5, 30.0, 61.0])
        a, b = ours(), drf()
        allowed = a.allow_request(request, None), b.allow_request(request, None)
        # then each allows or refuses alike, and advises the same wait
        assert allowed[0] == allowed[1]
        assert a.wait() == pytest.approx(b.wait()) if b.wait() is not None else a.wait() is None
        assert list(a.history) == list(reversed(b.history))


def test_the_history_is_stored_as_packed_doubles_for_the_period():
    clock = Clock()
    ours, _ = throttles("3/minute", clock)
    request = anonymous_request()
    for _ in range(3):
        clock.now += 1
        assert ours().allow_request(request, None)
    stored = cache.get("throttle_t-ours_203.0.113.7")
    assert isinstance(stored, bytes)
    assert list(history_of(stored)) == [1_000_001.0, 1_000_002.0, 1_000_003.0]
    # the fourth within the minute is refused, with DRF's wait: 58 s until the oldest leaves
    clock.now += 1
    refused = ours()
    assert refused.allow_request(request, None) is False
    assert refused.wait() == pytest.approx((60 - 3) / 1)


def test_a_history_drf_stored_as_a_list_still_counts():
    # given a DRF history (newest first) of two requests in the minute and one older
    clock = Clock()
    ours, _ = throttles("3/minute", clock)
    key = "throttle_t-ours_203.0.113.7"
    cache.set(key, [clock.now - 1, clock.now - 2, clock.now - 90], 60)
    # when two more come, then the first is allowed (the old one dropped), the second refused
    assert ours().allow_request(anonymous_request(), None) is True
    assert ours().allow_request(anonymous_request(), None) is False
    assert list(history_of(cache.get(key))) == [clock.now - 2, clock.now - 1, clock.now]
    assert list(history_of(None)) == [] and history_of(array("d").tobytes()) == array("d")


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
    assert own.get("throttle_anon_203.0.113.7") is not None
    assert cache.get("throttle_anon_203.0.113.7") is None


# --- Endpoints open to anyone: one throttle check per request --------------------------------


@pytest.mark.django_db
def test_an_anonymous_caller_is_counted_once_at_the_anonymous_rate(anon_client):
    from tests.orders.test_quotes_api import SPEC

    # when an anonymous caller asks for a quote
    assert anon_client.post("/api/v1/quotes", SPEC, format="json").status_code == 201
    # then its address has an anonymous history of one request and no per-caller history
    assert len(history_of(cache.get("throttle_anon_127.0.0.1"))) == 1
    assert cache.get("throttle_user_127.0.0.1") is None


@pytest.mark.django_db
def test_a_caller_with_a_key_is_counted_per_key_at_the_per_caller_rate(customer):
    from tests.orders.test_quotes_api import SPEC

    key = f"throttle_user_key-{customer.api_key.pk}"
    # given 60 quotes by this key in the last minute (the anonymous rate's limit)
    cache.set(key, array("d", [time.time()] * 60).tobytes(), 60)
    # when it asks for one more, it gets it: a key is counted at the per-caller rate...
    assert customer.client.post("/api/v1/quotes", SPEC, format="json").status_code == 201
    assert len(history_of(cache.get(key))) == 61
    # ...and never by its address at the anonymous rate
    assert cache.get("throttle_anon_127.0.0.1") is None
    # given 1,200 in the last minute (the per-caller limit), the next is refused
    cache.set(key, array("d", [time.time()] * 1200).tobytes(), 60)
    response = customer.client.post("/api/v1/quotes", SPEC, format="json")
    assert response.status_code == 429 and response.json()["code"] == "throttled"


def test_the_identified_caller_throttle_lets_anonymous_callers_to_the_anonymous_one():
    clock = Clock()
    identified = type(
        "Identified", (IdentifiedCallerRateThrottle,), {"rate": "1/minute", "timer": clock}
    )
    request = anonymous_request()
    assert [identified().allow_request(request, None) for _ in range(3)] == [True] * 3
    assert cache.get("throttle_user_203.0.113.7") is None
