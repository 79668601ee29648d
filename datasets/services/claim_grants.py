"""What claims and disputes both do (issue 28): record a claim's events and grant its items.

Its own module so that claims (which opens disputes) and disputes (which grant items) import
it and not each other."""

from datasets.models import Claim, ClaimEvent, ClaimItem, Delivery, EpisodeExclusion, Remedy
from datasets.services.delivery_versions import open_next_version
from datasets.services.exclusions import episodes_exclude
from marketplace.audit import system_label
from orders.models import Order

SYSTEM = system_label("claims")


def record_event(claim: Claim, action: str, actor: str, *, dispute=None, note="", data=None):
    return ClaimEvent.objects.create(
        claim=claim, dispute=dispute, action=action, actor_label=actor, note=note, data=data or {}
    )


def items_grant(*, claim: Claim, items: list[ClaimItem], actor: str) -> None:
    """Exclude the granted episodes with the claim's remedy: not paid to the fleet, and
    re-collected or credited; a credit on a delivered order gets the next version at once.
    The caller holds the order's lock."""
    if not items:
        return
    reasons = {str(i.episode_id): (i.reason_code, i.note or claim.note) for i in items}
    first = items[0]
    result = episodes_exclude(
        order_id=claim.order_id,
        staff_label=actor,
        episode_ids=list(reasons),
        reason_code=first.reason_code,
        note=first.note or claim.note,
        scope=EpisodeExclusion.Scope.ACCEPTANCE,
        remedy=claim.remedy,
        reasons=reasons,
        against_allowance=True,
    )
    for item in items:
        item.status = ClaimItem.Status.GRANTED
    ClaimItem.objects.bulk_update(items, ["status"])
    delivered = result.order.status == Order.Status.DELIVERED
    if claim.remedy == Remedy.CREDIT and result.excluded and delivered:
        open_next_version(
            order_id=result.order.id,
            kind=Delivery.Kind.FULL,
            reason=f"{len(result.excluded)} delivered episodes credited (claim {claim.id}).",
        )
