"""Fleet tests run Celery tasks eagerly, except the real-worker tests (tests/fleets/worker)."""

import pytest

from tests.conftest import celery_eagerly


@pytest.fixture(autouse=True)
def _celery_eager(request):
    if request.node.get_closest_marker("real_worker"):
        yield
        return
    with celery_eagerly():
        yield


@pytest.fixture
def paid_order(customer):
    from orders.models import Order
    from tests.factories import OrderFactory

    return OrderFactory(organization=customer.organization, status=Order.Status.PAID)
