"""factory_boy factories for billing rows (orders come from tests/factories.py)."""

import factory

from billing.models import Payment
from tests.factories import OrderFactory


class PaymentFactory(factory.django.DjangoModelFactory):
    """An open PaymentIntent attempt for an order (no Stripe call: for list/ledger tests)."""

    class Meta:
        model = Payment

    order = factory.SubFactory(OrderFactory)
    organization = factory.SelfAttribute("order.organization")
    method = Payment.Method.PAYMENT_INTENT
    amount = factory.SelfAttribute("order.total")
    currency = factory.SelfAttribute("order.currency")
    stripe_payment_intent_id = factory.Sequence(lambda n: f"pi_factory_{n}")
