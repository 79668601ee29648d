"""Staff credit delivered episodes (not bound by the acceptance window): excluded (datasets.
services.exclusions: not counted, the fleet's payable reversed before payout or carried as a
deduction after it) and credited (a pro rata refund through billing's refund path; the next
version, without them, is assembled at once). The customer's own rejections are claims
(datasets/services/claims.py)."""

from dataclasses import dataclass

from django.db import transaction

from datasets.error_codes import ErrorCode
from datasets.models import Delivery, Episode, EpisodeExclusion
from datasets.services.delivery_versions import (
    latest_full_delivery,
    open_next_version,
)
from datasets.services.exclusions import ExclusionResult, episode_uuids, episodes_exclude
from marketplace.errors import Conflict, NotFound, invalid
from orders.models import Order

Remedy = EpisodeExclusion.Remedy


@dataclass
class Rejection:
    exclusion: ExclusionResult
    next_version: Delivery | None  # assembled now (credit); re-collection delivers it later


def staff_credit_delivered_episodes(
    *,
    staff_label: str,
    order_id,
    reason_code: str,
    episode_ids=(),
    operator: str = "",
    note: str = "",
) -> Rejection:
    """Staff credit the customer for delivered episodes of an order's ready full delivery
    (or all of an operator's): excluded, refunded pro rata, the next version assembled at once.
    Not bound by the acceptance window. Before delivery there is nothing to credit (409): the
    hours are re-collected instead."""
    with transaction.atomic():
        order = Order.objects.select_for_update().filter(pk=order_id).first()
        if order is None:
            raise NotFound("Order not found.")
        latest = latest_full_delivery(order) if order.status == Order.Status.DELIVERED else None
        if latest is None or latest.status != Delivery.Status.READY:
            raise Conflict(
                "Only a delivered order's episodes are credited; before delivery, exclude "
                "them and their hours are collected again.",
                code=ErrorCode.DELIVERY_NOT_READY,
            )
        delivery = Delivery.objects.select_for_update().get(pk=latest.pk)
        ids = delivered_episodes_of(delivery, operator) if operator else episode_uuids(episode_ids)
        if not ids:
            raise invalid("episodes", "Name the delivered episodes (or an operator) to credit.")
        return _reject(
            delivery,
            ids,
            staff_label=staff_label,
            reason_code=reason_code,
            note=note,
            scope=EpisodeExclusion.Scope.OPERATOR if operator else EpisodeExclusion.Scope.EPISODE,
            remedy=Remedy.CREDIT,
        )


def delivered_episodes_of(delivery: Delivery, operator: str) -> list[str]:
    """The ids of an operator's episodes in a delivery (404 when it has none)."""
    ids = [
        str(pk)
        for pk in Episode.objects.filter(
            pk__in=delivery.episode_ids, operator=operator
        ).values_list("pk", flat=True)
    ]
    if not ids:
        raise NotFound("No delivered episode of this operator.")
    return ids


def _reject(delivery: Delivery, ids: list[str], *, remedy: str, reason_code: str, **exclude):
    """Exclude episodes of `delivery` (all must be in it); credited ones get the next version
    at once. The caller holds the delivery's lock."""
    outside = sorted(set(ids) - set(delivery.episode_ids))
    if outside:
        raise invalid("episodes", f"Not in this delivery: {', '.join(outside[:5])}.")
    result = episodes_exclude(
        order_id=delivery.order_id,
        episode_ids=ids,
        reason_code=reason_code,
        remedy=remedy,
        **exclude,
    )
    following = None
    if remedy == Remedy.CREDIT and result.excluded:
        following = open_next_version(
            order_id=delivery.order_id,
            kind=delivery.kind,
            reason=f"{len(result.excluded)} delivered episodes rejected ({reason_code}) "
            "and credited.",
        )
    return Rejection(exclusion=result, next_version=following)
