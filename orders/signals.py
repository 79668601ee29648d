"""Signals orders emits for other apps. Receivers live in the consuming app's receivers.py
and stay thin: they enqueue a task. All are sent after the transaction commits."""

from django.dispatch import Signal

# kwargs: order_id
order_paid = Signal()
order_cancelled = Signal()
# kwargs: order_id, and for planned orders (cells_planned) plan_delivered: {"environments": n,
# "objects": m}, the distinct environments and objects among the accepted episodes delivered
order_delivered = Signal()
# kwargs: order_id, job_ids (whose accepted seconds went down: excluded episodes), credit
# (True: the customer is credited for those hours instead of their re-collection)
order_hours_excluded = Signal()
