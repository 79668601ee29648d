"""ApiRequestLimitsMiddleware's depth check at its limit: a body with no more brackets than
the limit is not measured (it cannot nest deeper), one with more is, wherever they are."""

import json

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from marketplace.request_limits import ApiRequestLimitsMiddleware


def answer(body: str):
    request = RequestFactory().post("/api/v1/quotes", body, content_type="application/json")
    return ApiRequestLimitsMiddleware(lambda request: HttpResponse(status=204))(request)


@pytest.mark.parametrize("most", [1, 3, 32])
def test_nesting_up_to_the_limit_passes_and_one_deeper_is_refused(settings, most):
    settings.API_MAX_JSON_DEPTH = most
    at_limit = "[" * most + "]" * most
    assert answer(at_limit).status_code == 204
    deeper = answer("[" * (most + 1) + "]" * (most + 1))
    assert deeper.status_code == 400
    assert json.loads(deeper.content)["code"] == "malformed_request"
    assert f"nested {most + 1} levels deep; at most {most}" in json.loads(deeper.content)["message"]
    # four openers, three deep: measured when the limit is below four, refused below three
    spread = json.dumps({"a": [], "b": {"c": {"d": "x"}}})
    assert answer(spread).status_code == (400 if most < 3 else 204)


def test_many_brackets_but_shallow_or_in_strings_pass(settings):
    settings.API_MAX_JSON_DEPTH = 3
    assert answer(json.dumps([[] for _ in range(50)])).status_code == 204
    assert answer(json.dumps({"notes": "[{" * 50})).status_code == 204
