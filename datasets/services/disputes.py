"""Disputes (issue 28): the claimed episodes not granted at once, one dispute per claim and
fleet. The fleet is told (webhook `dispute.opened`, the fleet API and portal) and may answer
until DISPUTE_ANSWER_DAYS have passed; then, answered or not, staff decide on the staff
console: grant, grant some episodes (partial) or refuse, always with a note. Nothing is ever
granted automatically. Granted episodes are excluded with the claim's remedy (the fleet is not
paid for them; re-collected or credited); refused ones stay accepted, delivered and paid.
States: open -> awaiting_decision -> decided (DISPUTE_TRANSITIONS); every step is a
ClaimEvent."""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from datasets.error_codes import ErrorCode
from datasets.models import DISPUTE_TRANSITIONS, Claim, ClaimEvent, ClaimItem, Dispute
from datasets.services.claim_grants import SYSTEM, items_grant, record_event
from datasets.services.exclusions import episode_uuids
from fleets.models import Fleet
from fleets.services.webhooks import webhook_enqueue
from marketplace.audit import actor_label
from marketplace.error_codes import ErrorCode as CommonCode
from marketplace.errors import Conflict, NotFound, ServiceError, invalid
from marketplace.models import Membership
from marketplace.tenancy import Caller
from marketplace.transitions import require_transition
from orders.models import Order

ANSWERING_ROLES = (Membership.Role.OWNER, Membership.Role.MEMBER)
Decision = Dispute.Decision


class DisputeClosed(Conflict):
    code = ErrorCode.DISPUTE_CLOSED


class AnswerRoleRefused(ServiceError):
    status_code = 403
    code = CommonCode.PERMISSION_DENIED


def _move(dispute: Dispute, to_status: str) -> None:
    """Change a dispute's status by the map; the caller holds its lock and saves it."""
    require_transition(
        transitions=DISPUTE_TRANSITIONS,
        from_status=dispute.status,
        to_status=to_status,
        what="A dispute",
        error=DisputeClosed,
    )
    dispute.status = to_status


def dispute_payload(dispute: Dispute) -> dict:
    """What the fleet is told and reads (never who the customer is)."""
    claim = dispute.claim
    return {
        "dispute": str(dispute.id),
        "order": str(claim.order_id),
        "status": dispute.status,
        "remedy": claim.remedy,
        "answer_due_at": dispute.answer_due_at.isoformat(),
        "decision": dispute.decision,
        "episodes": [
            {
                "episode": str(item.episode_id),
                "job": str(item.episode.job_id),
                "reason_code": item.reason_code,
                "start_seconds": None if item.start_seconds is None else str(item.start_seconds),
                "end_seconds": None if item.end_seconds is None else str(item.end_seconds),
                "note": item.note or claim.note,
                "status": item.status,
            }
            for item in dispute.items.select_related("episode").order_by("id")
        ],
        "url": f"/api/v1/fleet/disputes/{dispute.id}",
    }


def disputes_open(*, claim: Claim, items: list[ClaimItem]) -> list[Dispute]:
    """A dispute per fleet for the claim's items not granted at once; each fleet is told.
    The caller holds the order's and claim's locks."""
    by_fleet: dict = {}
    for item in items:
        by_fleet.setdefault(item.episode.fleet_id, []).append(item)
    due = timezone.now() + timedelta(days=settings.DISPUTE_ANSWER_DAYS)
    opened = []
    for fleet_id, fleet_items in sorted(by_fleet.items(), key=lambda pair: str(pair[0])):
        dispute = Dispute.objects.create(claim=claim, fleet_id=fleet_id, answer_due_at=due)
        for item in fleet_items:
            item.dispute, item.status = dispute, ClaimItem.Status.DISPUTED
        ClaimItem.objects.bulk_update(
            fleet_items, ["dispute", "status", "recheck", "recheck_detail", "route"]
        )
        record_event(
            claim,
            ClaimEvent.Action.DISPUTED,
            SYSTEM,
            dispute=dispute,
            data={
                "episodes": [str(i.episode_id) for i in fleet_items],
                "answer_due_at": due.isoformat(),
            },
        )
        webhook_enqueue(
            fleet=Fleet.objects.get(pk=fleet_id),
            event_type="dispute.opened",
            data=dispute_payload(dispute),
        )
        opened.append(dispute)
    return opened


def _text(value, field_name: str, what: str) -> str:
    value = (value or "").strip()
    if not value:
        raise invalid(field_name, what)
    if "\x00" in value:
        raise invalid(field_name, "Null characters are not allowed.")
    if len(value) > 4000:
        raise invalid(field_name, "At most 4000 characters.")
    return value


def dispute_answer(*, caller: Caller, dispute_id, answer: str) -> Dispute:
    """The fleet's answer (owners and members of the fleet's organization), once, before its
    deadline. Another organization's dispute is a 404."""
    if not caller.has_role(*ANSWERING_ROLES):
        raise AnswerRoleRefused("Your role may not answer disputes (owners and members do).")
    answer = _text(answer, "answer", "Say what the fleet answers.")
    with transaction.atomic():
        dispute = (
            Dispute.objects.select_for_update()
            .filter(pk=dispute_id, fleet__organization=caller.organization)
            .first()
        )
        if dispute is None:
            raise NotFound("Dispute not found.")
        if dispute.status != Dispute.Status.OPEN:
            raise DisputeClosed("This dispute was answered already, or its time to answer is over.")
        if timezone.now() > dispute.answer_due_at:
            raise DisputeClosed(
                f"The time to answer ended on {dispute.answer_due_at:%Y-%m-%d %H:%M} UTC; staff "
                "decide without an answer."
            )
        dispute.answer = answer
        dispute.answered_at = timezone.now()
        dispute.answered_by = actor_label(caller)
        _move(dispute, Dispute.Status.AWAITING_DECISION)
        dispute.save(update_fields=["answer", "answered_at", "answered_by", "status"])
        record_event(
            dispute.claim,
            ClaimEvent.Action.ANSWERED,
            dispute.answered_by,
            dispute=dispute,
            note=answer,
        )
    return dispute


def _time_up(dispute: Dispute) -> None:
    """An open dispute past its deadline goes to staff (never granted by itself)."""
    _move(dispute, Dispute.Status.AWAITING_DECISION)
    dispute.save(update_fields=["status"])
    record_event(dispute.claim, ClaimEvent.Action.ANSWER_TIME_UP, SYSTEM, dispute=dispute)


def disputes_time_up() -> int:
    """celery beat (claims_sweep): open disputes past their deadline go to staff."""
    moved = 0
    due = Dispute.objects.filter(status=Dispute.Status.OPEN, answer_due_at__lt=timezone.now())
    for dispute_id in due.values_list("id", flat=True)[:500]:
        with transaction.atomic():
            dispute = Dispute.objects.select_for_update().get(pk=dispute_id)
            if dispute.status == Dispute.Status.OPEN and timezone.now() > dispute.answer_due_at:
                _time_up(dispute)
                moved += 1
    return moved


def dispute_decide(
    *, staff_label: str, dispute_id, decision: str, note: str, episode_ids=()
) -> Dispute:
    """Staff decide a dispute the fleet answered or let pass: grant every episode, some
    (`partial`, the named ones) or none, with a note. Granted episodes are excluded with the
    claim's remedy; refused ones stay accepted, delivered and paid."""
    if decision not in Decision.values:
        raise invalid("decision", f"One of: {', '.join(Decision.values)}.")
    note = _text(note, "note", "Say why: every decision is explained.")
    order_id = Dispute.objects.filter(pk=dispute_id).values_list("claim__order_id", flat=True)
    with transaction.atomic():
        Order.objects.select_for_update().filter(pk__in=order_id).first()
        dispute = Dispute.objects.select_for_update().select_related("claim").filter(pk=dispute_id)
        dispute = dispute.first()
        if dispute is None:
            raise NotFound("Dispute not found.")
        _require_decidable(dispute)
        items = list(dispute.items.select_for_update(of=("self",)).select_related("episode"))
        granted = _granted(items, decision, episode_ids)
        refused = [item for item in items if item not in granted]
        items_grant(claim=dispute.claim, items=granted, actor=staff_label)
        for item in refused:
            item.status = ClaimItem.Status.REFUSED
        ClaimItem.objects.bulk_update(refused, ["status"])
        dispute.decision, dispute.decision_note = decision, note
        dispute.decided_at, dispute.decided_by = timezone.now(), staff_label
        _move(dispute, Dispute.Status.DECIDED)
        dispute.save(
            update_fields=["decision", "decision_note", "decided_at", "decided_by", "status"]
        )
        record_event(
            dispute.claim,
            ClaimEvent.Action.DECIDED,
            staff_label,
            dispute=dispute,
            note=note,
            data={
                "decision": decision,
                "granted": [str(i.episode_id) for i in granted],
                "refused": [str(i.episode_id) for i in refused],
            },
        )
        _close_claim_if_decided(dispute.claim)
        webhook_enqueue(
            fleet=dispute.fleet, event_type="dispute.decided", data=dispute_payload(dispute)
        )
    return dispute


def _require_decidable(dispute: Dispute) -> None:
    """The caller holds the dispute's lock."""
    if dispute.status == Dispute.Status.OPEN:
        if timezone.now() <= dispute.answer_due_at:
            raise Conflict(
                f"The fleet may answer until {dispute.answer_due_at:%Y-%m-%d %H:%M} UTC: decide "
                "after its answer or then.",
                code=ErrorCode.DISPUTE_AWAITING_FLEET,
            )
        _time_up(dispute)
    if dispute.status != Dispute.Status.AWAITING_DECISION:
        raise DisputeClosed("This dispute is decided already.")


def _granted(items: list[ClaimItem], decision: str, episode_ids) -> list[ClaimItem]:
    if decision == Decision.GRANTED:
        return items
    if decision == Decision.REFUSED:
        return []
    named = set(episode_uuids(episode_ids))
    disputed = {str(item.episode_id) for item in items}
    if not named or not named < disputed or named - disputed:
        raise invalid(
            "episodes",
            "A partial decision grants some of the disputed episodes, not none or all "
            "(name them; grant or refuse the whole dispute otherwise).",
        )
    return [item for item in items if str(item.episode_id) in named]


def _close_claim_if_decided(claim: Claim) -> None:
    if claim.disputes.exclude(status=Dispute.Status.DECIDED).exists():
        return
    claim.status, claim.decided_at = Claim.Status.DECIDED, timezone.now()
    claim.save(update_fields=["status", "decided_at"])
