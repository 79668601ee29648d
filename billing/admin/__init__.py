"""Billing in the Django admin: money in (payments.py) and money out (payouts.py)."""

from billing.admin import payments, payouts  # noqa: F401 (registers the model admins)
