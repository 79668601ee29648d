"""Billing writes, by subdomain. Stripe is reached only through billing.stripe_gateway; the
ledger is posted only through billing.ledger.

    flags.py          things staff must look at
    payments.py       paying an order; the payment state machine (payment_move)
    refunds.py        refunds, the true-up at delivery, cancellation refunds
    stripe_events.py  Stripe's webhooks: stored once, handled once
    payables.py       what fleets earned on a delivered order
    payouts.py        paying fleets (Stripe Connect transfers)
    sweep.py          the billing sweep (celery beat)

Conventions: keyword-only functions; lock (order first, then payment), then check; side
effects after commit (marketplace.queueing); safe to run twice.
"""
