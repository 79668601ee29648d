"""Fleet tests run Celery tasks eagerly, except the real-worker tests (tests/fleets/worker)."""

import pytest

from marketplace.celery import app


@pytest.fixture(autouse=True)
def _celery_eager(request):
    if request.node.get_closest_marker("real_worker"):
        yield
        return
    app.conf.task_always_eager = True
    app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager = False
    app.conf.task_eager_propagates = False


@pytest.fixture
def paid_order(customer):
    from orders.models import Order
    from tests.factories import OrderFactory

    return OrderFactory(organization=customer.organization, status=Order.Status.PAID)
