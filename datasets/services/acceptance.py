"""The customer's acceptance window: for DELIVERY_ACCEPTANCE_DAYS after a full delivery is
ready, the customer may reject delivered episodes with a reason code. Rejected episodes are
excluded (datasets.services.exclusions: not counted, the fleet's payable reversed before
payout or carried as a deduction after it) and either re-collected (the order goes back to
collection; the next version is delivered when they are in) or credited (a pro rata refund
through billing's refund path; the next version, without them, is assembled at once)."""

from dataclasses import dataclass

from django.db import transaction

from datasets.error_codes import ErrorCode
from datasets.models import Delivery, EpisodeExclusion
from datasets.services.delivery_versions import (
    acceptance_deadline,
    open_next_version,
    require_acceptance_window,
)
from datasets.services.downloads import customer_delivery
from datasets.services.exclusions import ExclusionResult, episode_uuids, episodes_exclude
from marketplace.errors import Conflict, invalid
from marketplace.tenancy import Caller

Remedy = EpisodeExclusion.Remedy


@dataclass
class Rejection:
    exclusion: ExclusionResult
    next_version: Delivery | None  # assembled now (credit); re-collection delivers it later


def delivery_reject_episodes(
    *,
    caller: Caller,
    delivery_id,
    episode_ids,
    reason_code: str,
    note: str = "",
    remedy: str = Remedy.RECOLLECT,
) -> Rejection:
    """Reject delivered episodes of the latest full delivery, within the window (else a 409
    saying when it closed). Episodes not in this delivery are a 400; another tenant's
    delivery is a 404; rejecting an episode again changes nothing."""
    if remedy not in Remedy.values:
        raise invalid("remedy", f"One of: {', '.join(Remedy.values)}.")
    ids = episode_uuids(episode_ids)
    if not ids:
        raise invalid("episodes", "Name the delivered episodes to reject.")
    with transaction.atomic():
        delivery = customer_delivery(
            organization=caller.organization, delivery_id=delivery_id, lock=True
        )
        _check_open(delivery)
        outside = sorted(set(ids) - set(delivery.episode_ids))
        if outside:
            raise invalid("episodes", f"Not in this delivery: {', '.join(outside[:5])}.")
        result = episodes_exclude(
            caller=caller,
            order_id=delivery.order_id,
            episode_ids=ids,
            reason_code=reason_code,
            note=note,
            scope=EpisodeExclusion.Scope.ACCEPTANCE,
            remedy=remedy,
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


def _check_open(delivery: Delivery) -> None:
    deadline = acceptance_deadline(delivery)
    if delivery.status != Delivery.Status.READY or deadline is None:
        raise Conflict(
            "Only the episodes of a ready full delivery are rejected (a pilot is reviewed).",
            code=ErrorCode.DELIVERY_NOT_READY,
        )
    if delivery.superseded_at is not None:
        raise Conflict(
            f"Version {delivery.version} is replaced by a newer one: reject episodes there.",
            code=ErrorCode.DELIVERY_SUPERSEDED,
        )
    require_acceptance_window(delivery)
