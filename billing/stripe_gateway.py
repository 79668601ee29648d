"""The only module that talks to Stripe (stripe-python's StripeClient).

Everything that leaves here is plain Python: ids, Decimal amounts, dicts. Integers in minor
units exist only inside this module. Every write carries an idempotency key the caller
derives from our own ids, so a retried call never creates a second object at Stripe.
"""

import json
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

import stripe
from django.conf import settings

from orders.pricing import MINOR_UNITS, to_minor_units


class GatewayError(Exception):
    """Stripe refused the request for good: retrying the same call will not help."""


class GatewayUnavailable(GatewayError):
    """Stripe could not be reached or failed on its side (5xx, 429): retry later."""


class GatewayNotConfigured(GatewayError):
    """No STRIPE_API_KEY: online payment is switched off."""


class WebhookSignatureInvalid(Exception):
    pass


@dataclass(frozen=True)
class IntentResult:
    id: str
    client_secret: str
    status: str


@dataclass(frozen=True)
class CheckoutResult:
    id: str
    url: str


@dataclass(frozen=True)
class RefundResult:
    id: str
    status: str


def minor_units(amount: Decimal, currency: str) -> int:
    return to_minor_units(amount, currency.upper())


def from_minor_units(amount: int, currency: str) -> Decimal:
    return Decimal(int(amount)).scaleb(-MINOR_UNITS[currency.upper()])


def is_configured() -> bool:
    return bool(settings.STRIPE_API_KEY)


@lru_cache(maxsize=8)
def _client(
    api_key: str, api_base: str | None, retries: int, timeout: float
) -> stripe.StripeClient:
    kwargs = {
        "max_network_retries": retries,
        "http_client": stripe.RequestsClient(timeout=timeout),
    }
    if api_base:
        kwargs["base_addresses"] = {"api": api_base}
    return stripe.StripeClient(api_key, **kwargs)


def client() -> stripe.StripeClient:
    if not is_configured():
        raise GatewayNotConfigured("STRIPE_API_KEY is not set.")
    return _client(
        settings.STRIPE_API_KEY,
        settings.STRIPE_API_BASE,
        settings.STRIPE_MAX_NETWORK_RETRIES,
        settings.STRIPE_TIMEOUT_SECONDS,
    )


def _call(func, params: dict, idempotency_key: str | None = None):
    options = {"idempotency_key": idempotency_key} if idempotency_key else None
    try:
        return func(params=params, options=options)
    except (stripe.APIConnectionError, stripe.RateLimitError) as exc:
        raise GatewayUnavailable(f"Stripe could not be reached: {exc.user_message or exc}") from exc
    except stripe.StripeError as exc:
        status = getattr(exc, "http_status", None) or 0
        message = getattr(exc, "user_message", None) or str(exc) or exc.__class__.__name__
        if status >= 500 or isinstance(exc, stripe.APIError):
            raise GatewayUnavailable(f"Stripe failed ({status}): {message}") from exc
        raise GatewayError(f"Stripe refused the request ({status}): {message}") from exc


def customer_create(*, name: str, organization_id: str, idempotency_key: str) -> str:
    customer = _call(
        client().v1.customers.create,
        {"name": name, "metadata": {"organization_id": organization_id}},
        idempotency_key,
    )
    return customer.id


def payment_intent_create(
    *,
    amount: Decimal,
    currency: str,
    customer_id: str,
    metadata: dict[str, str],
    idempotency_key: str,
) -> IntentResult:
    intent = _call(
        client().v1.payment_intents.create,
        {
            "amount": minor_units(amount, currency),
            "currency": currency.lower(),
            "customer": customer_id,
            "metadata": metadata,
            "payment_method_types": ["card"],
        },
        idempotency_key,
    )
    return IntentResult(id=intent.id, client_secret=intent.client_secret, status=intent.status)


def checkout_session_create(
    *,
    amount: Decimal,
    currency: str,
    customer_id: str,
    description: str,
    client_reference_id: str,
    metadata: dict[str, str],
    success_url: str,
    cancel_url: str,
    idempotency_key: str,
) -> CheckoutResult:
    session = _call(
        client().v1.checkout.sessions.create,
        {
            "mode": "payment",
            "customer": customer_id,
            "client_reference_id": client_reference_id,
            "line_items": [
                {
                    "quantity": 1,
                    "price_data": {
                        "currency": currency.lower(),
                        "unit_amount": minor_units(amount, currency),
                        "product_data": {"name": description[:250]},
                    },
                }
            ],
            "metadata": metadata,
            "payment_intent_data": {"metadata": metadata},
            "success_url": success_url,
            "cancel_url": cancel_url,
        },
        idempotency_key,
    )
    return CheckoutResult(id=session.id, url=session.url)


def refund_create(
    *,
    payment_intent_id: str,
    amount: Decimal,
    currency: str,
    metadata: dict[str, str],
    idempotency_key: str,
) -> RefundResult:
    refund = _call(
        client().v1.refunds.create,
        {
            "payment_intent": payment_intent_id,
            "amount": minor_units(amount, currency),
            "metadata": metadata,
        },
        idempotency_key,
    )
    return RefundResult(id=refund.id, status=refund.status)


@dataclass(frozen=True)
class TransferResult:
    id: str
    amount: Decimal
    currency: str
    destination: str


def transfer_create(
    *,
    amount: Decimal,
    currency: str,
    destination: str,
    transfer_group: str,
    metadata: dict[str, str],
    idempotency_key: str,
) -> TransferResult:
    """A Stripe Connect transfer from our balance to a connected account (a fleet payout)."""
    transfer = _call(
        client().v1.transfers.create,
        {
            "amount": minor_units(amount, currency),
            "currency": currency.lower(),
            "destination": destination,
            "transfer_group": transfer_group,
            "metadata": metadata,
        },
        idempotency_key,
    )
    return TransferResult(
        id=transfer.id,
        amount=from_minor_units(transfer.amount, transfer.currency),
        currency=str(transfer.currency).upper(),
        destination=str(transfer.destination),
    )


def transfer_find(*, transfer_group: str) -> TransferResult | None:
    """The transfer already made for a transfer group (our payout), if any.

    Looked up before every send, so a payout whose response was lost is recognised even
    after Stripe has forgotten its idempotency key (24 hours).
    """
    page = _call(client().v1.transfers.list, {"transfer_group": transfer_group, "limit": 1})
    for transfer in page.data:
        return TransferResult(
            id=transfer.id,
            amount=from_minor_units(transfer.amount, transfer.currency),
            currency=str(transfer.currency).upper(),
            destination=str(transfer.destination),
        )
    return None


def webhook_verify(*, payload: bytes, signature_header: str | None) -> dict:
    """Check Stripe's signature (and its timestamp tolerance), then parse the event."""
    secret = settings.STRIPE_WEBHOOK_SECRET
    try:
        text = payload.decode("utf-8")
        stripe.WebhookSignature.verify_header(
            text, signature_header or "", secret, settings.STRIPE_WEBHOOK_TOLERANCE_SECONDS
        )
        event = json.loads(text)
    except (stripe.SignatureVerificationError, UnicodeDecodeError, ValueError) as exc:
        raise WebhookSignatureInvalid(str(exc) or "invalid signature") from exc
    if not isinstance(event, dict) or not isinstance(event.get("id"), str):
        raise WebhookSignatureInvalid("not a Stripe event")
    return event


def event_amount(obj: dict, field: str = "amount") -> tuple[Decimal | None, str]:
    """(amount as Decimal, upper-case currency) of a Stripe object, None if absent/unknown."""
    currency = str(obj.get("currency") or "").upper()
    raw = obj.get(field)
    if currency not in MINOR_UNITS or not isinstance(raw, int):
        return None, currency
    return from_minor_units(raw, currency), currency
