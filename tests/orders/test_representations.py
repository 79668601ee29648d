"""The hot endpoints' plain-dict bodies equal their serializers' output, field for field."""

from decimal import Decimal

import pytest

from orders import services
from orders.api import QuoteSerializer
from orders.models import Quote
from orders.representations import quote_representation
from orders.services import DatasetRequest

pytestmark = pytest.mark.django_db

REQUESTS = [
    DatasetRequest(task_type="peg-insertion", embodiment="franka-fr3", hours=Decimal("120")),
    DatasetRequest(
        task_type="peg-insertion",
        embodiment="aloha-bimanual",
        hours=Decimal("3.5"),
        environments=3,
        objects_per_environment=7,
        sensors=["wrist-camera", "force-torque"],
        rush=True,
        complexity=5,
    ),
    DatasetRequest(task_type="peg-insertion", embodiment="so100", hours=Decimal("2000.25")),
]


@pytest.mark.parametrize("request_", REQUESTS, ids=["plain", "sensors-rush", "volume"])
def test_a_quote_as_returned_equals_the_serializers_body(customer, request_):
    quote = services.quote_create(organization=customer.organization, request=request_)
    assert quote_representation(quote) == QuoteSerializer(quote).data
    stored = Quote.objects.select_related("task_type", "embodiment", "rate_card").get(pk=quote.pk)
    assert quote_representation(stored) == QuoteSerializer(stored).data


def test_the_endpoint_answers_the_plain_body(anon_client):
    body = {"task_type": "peg-insertion", "embodiment": "ur5e", "hours": "10", "rush": True}
    answer = anon_client.post("/api/v1/quotes", body, format="json")
    assert answer.status_code == 201
    stored = Quote.objects.get(pk=answer.json()["id"])
    assert answer.json() == QuoteSerializer(stored).data
