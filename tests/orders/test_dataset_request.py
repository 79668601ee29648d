"""orders/dataset_request.py: whatever the plain reading accepts, DatasetRequestSerializer
accepts with the same request; whatever it does not, the serializer decides (and words the
errors). The quote endpoints take the plain reading for a plainly valid body."""

from decimal import Decimal
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from orders import api
from orders.api import DatasetRequestSerializer
from orders.dataset_request import REFUSED_PRICE_FIELDS, plain_dataset_request

# per field: values plainly valid, and values valid only in another spelling or invalid
VALID = {
    "task_type": ["peg-insertion", "a", "x" * 60, "A_1-b"],
    "embodiment": ["franka-fr3", "so_100"],
    "hours": ["120", "0.01", "0.5", "9999999.99", "0000120", "3.1", 1, 120, 9_999_999],
    "complexity": [None, 1, 3, 5],
    "environments": [1, 4, 10**6],
    "objects_per_environment": [1, 7, 100000],
    "sensors": [[], ["wrist-camera"], ["a", "b"], ["x"] * 20],
    "rush": [True, False],
}
ODD = {
    "task_type": ["x" * 61, " peg ", "peg\n", "", "ü", 5, None, ["a"]],
    "embodiment": ["bad slug", 1.5, True, None],
    "hours": [
        "0.00",
        "0",
        "0.001",
        "10000000",
        "1e3",
        " 5",
        "-1",
        "+5",
        "5.",
        ".5",
        "nan",
        "",
        0,
        10**7,
        1.5,
        True,
        None,
        "00000000120",
    ],
    "complexity": [0, 6, "3", 3.0, True, False],
    "environments": [0, -1, "2", 2.0, None, True],
    "objects_per_environment": [100001, 0, "7", None, False],
    "sensors": ["wrist-camera", [1], [" a"], ["x"] * 21, None, {"a": 1}, ("a",), ["x" * 61]],
    "rush": ["true", 1, 0, None, "no"],
}
REQUIRED = ("task_type", "embodiment", "hours")


@st.composite
def bodies(draw):
    """Mostly valid bodies, each field now and then left out or odd."""
    body = {}
    for name in VALID:
        if draw(st.integers(0, 9)) < (1 if name in REQUIRED else 4):
            continue  # left out
        odd = draw(st.integers(0, 9)) == 0
        body[name] = draw(st.sampled_from(ODD[name] if odd else VALID[name]))
    if draw(st.integers(0, 1)) == 0 and "hours" in body:
        body["hours"] = draw(
            st.one_of(
                st.decimals(min_value=0, max_value=10**8, places=3).map(str),
                st.integers(min_value=-5, max_value=10**8),
            )
        )
    if draw(st.integers(0, 19)) == 0:
        body[draw(st.sampled_from(REFUSED_PRICE_FIELDS))] = "1"
    if draw(st.integers(0, 9)) == 0:
        body["unknown"] = "ignored"
    return body


def _serializers(body):
    serializer = DatasetRequestSerializer(data=body)
    return serializer.to_request() if serializer.is_valid() else None


PLAIN = {"task_type": "peg-insertion", "embodiment": "franka-fr3", "hours": "120"}


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bodies())
@example(PLAIN)
@example({**PLAIN, "complexity": None, "sensors": ["wrist-camera"], "rush": True})
@example({**PLAIN, "hours": 7, "environments": 3, "objects_per_environment": 100000})
def test_what_the_plain_reading_accepts_the_serializer_accepts_alike(body):
    plain = plain_dataset_request(body)
    if plain is not None:
        assert _serializers(body) == plain
        assert type(plain.hours) is Decimal and plain.hours.as_tuple().exponent == -2


@pytest.mark.parametrize(
    "body",
    [
        PLAIN,
        {**PLAIN, "hours": "0.5", "complexity": 2, "environments": 4, "sensors": ["wrist-camera"]},
        {**PLAIN, "hours": 12, "rush": True, "objects_per_environment": 3, "complexity": None},
    ],
)
def test_plain_bodies_are_read_directly(body):
    assert plain_dataset_request(body) == _serializers(body) is not None


@pytest.mark.parametrize(
    "body",
    [
        {**PLAIN, "hours": " 120"},  # valid, but spelled otherwise
        {**PLAIN, "environments": "4"},
        {**PLAIN, "hours": "0.00"},  # invalid
        {**PLAIN, "total": "1"},  # refused
        ["not", "an", "object"],
    ],
)
def test_the_rest_is_left_to_the_serializer(body):
    assert plain_dataset_request(body) is None


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/quotes", "/api/v1/quotes/preview"])
def test_the_quote_endpoints_skip_the_serializer_for_a_plain_body(anon_client, path):
    with mock.patch.object(api, "DatasetRequestSerializer", side_effect=AssertionError("used")):
        answer = anon_client.post(path, {**PLAIN, "sensors": ["wrist-camera"]}, format="json")
    assert answer.status_code in (200, 201), answer.content
    assert answer.json()["hours"] == "120.00"
    assert answer.json()["sensors"] == ["wrist-camera"]


@pytest.mark.django_db
def test_the_serializers_errors_still_answer_a_bad_body(anon_client):
    answer = anon_client.post("/api/v1/quotes", {**PLAIN, "hours": "0.00"}, format="json")
    assert answer.status_code == 400
    assert answer.json()["fields"] == {
        "hours": ["Ensure this value is greater than or equal to 0.01."]
    }
    answer = anon_client.post("/api/v1/quotes", {**PLAIN, "hours": " 3"}, format="json")
    assert answer.status_code == 201 and answer.json()["hours"] == "3.00"
