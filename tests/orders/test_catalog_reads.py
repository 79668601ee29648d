"""A quote (and an order from a full specification) reads the cached catalog once: one
lookup of its version in the shared cache (a round trip with Redis), the request resolved and
the rate card in force taken from the same copy."""

from decimal import Decimal
from unittest import mock

import pytest
from django.core.cache import cache

from orders import catalog, services
from orders.services import DatasetRequest

pytestmark = pytest.mark.django_db

REQUEST = DatasetRequest(task_type="peg-insertion", embodiment="franka-fr3", hours=Decimal("12"))


def version_lookups(action) -> int:
    catalog.current()  # the copy loaded: what follows is a warm request
    with mock.patch.object(catalog, "cache", wraps=cache) as shared:
        action()
    return sum(1 for call in shared.get.call_args_list if call.args[0] == catalog.VERSION_KEY)


def test_a_quote_looks_the_catalog_version_up_once():
    quotes = []
    lookups = version_lookups(
        lambda: quotes.append(services.quote_create(organization=None, request=REQUEST))
    )
    assert lookups == 1
    (quote,) = quotes
    assert quote.task_type.slug == "peg-insertion" and quote.total > 0 and quote.rate_card_id


def test_an_order_from_a_specification_looks_it_up_once(customer):
    from marketplace.tenancy import Caller

    caller = Caller(organization=customer.organization, role="owner", user=customer.user)
    details = services.OrderDetails()
    order = []
    lookups = version_lookups(
        lambda: order.append(services.order_create(caller=caller, request=REQUEST, details=details))
    )
    # once: the copy that resolved and priced it also gives its stream spec's sensors
    assert lookups == 1 and order[0].rate_card_id is not None
    assert order[0].stream_spec["state"]["key"] == "observation.state" and order[0].total > 0


def test_with_no_rate_card_in_force_a_quote_is_refused_as_before():
    from marketplace.errors import ServiceError
    from orders.models import RateCard

    RateCard.objects.all().delete()
    with pytest.raises(ServiceError) as refused:
        services.quote_create(organization=None, request=REQUEST)
    assert refused.value.code == "no_rate_card"
