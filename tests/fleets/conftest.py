"""Fleet tests run Celery tasks eagerly, except the real-worker tests (tests/fleets/worker)."""

import importlib

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


@pytest.fixture(autouse=True)
def _fleets_seeded_catalog(request):
    """A transactional test empties every table when it ends, the seeded catalog included:
    put the catalog and rate card v1 back (as the data migration seeds them) before the next."""
    marker = request.node.get_closest_marker("django_db")
    if marker and marker.kwargs.get("transaction"):
        request.getfixturevalue("transactional_db")
        from django.apps import apps as django_apps

        from orders.models import RateCard

        if not RateCard.objects.exists():
            importlib.import_module("orders.migrations.0002_seed_catalog").seed(django_apps, None)
