"""Claims (issue 28): the customer rejects delivered episodes of an order's latest full
delivery, within the order's acceptance window, naming per episode a reason code, optionally a
time range within it and a note, and one remedy: re-collection or credit.

- Who: re-collection needs the owner or member role, credit (money) the owner or billing role.
- Once: an episode is claimed once across every version (ClaimItem.episode is unique); hours
  re-collected once are not re-collected again at the customer's request.
- Granted at once only when the reason is one a machine can check, the automatic re-check
  (datasets/claim_checks.py: the stored QA figures, or content QA run again on the claimed
  range) confirms it, and the customer's rejected share of the order stays within its
  allowance (datasets/services/allowance.py). The re-check runs in a task (qa queue).
- Everything else opens a dispute per fleet (datasets/services/disputes.py): the fleet is told
  and may answer, staff decide. Nothing is excluded, credited or reversed before it is granted.
Every step is an append-only ClaimEvent."""

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import pyarrow.parquet as pq
from django.db import transaction
from django.utils import timezone

from datasets import claim_checks, storage
from datasets.error_codes import ErrorCode
from datasets.models import (
    Claim,
    ClaimEvent,
    ClaimItem,
    Delivery,
    Episode,
    ExclusionReason,
    Recollection,
)
from datasets.qa_checks import ACTION, STATE
from datasets.qa_content import check_content
from datasets.services.allowance import order_allowance
from datasets.services.claim_grants import SYSTEM, items_grant, record_event
from datasets.services.delivery_versions import (
    latest_full_delivery,
    require_acceptance_window,
)
from datasets.services.disputes import disputes_open
from datasets.services.downloads import customer_delivery
from datasets.services.episode_media import column_matrix
from datasets.services.exclusions import episode_uuids
from datasets.services.qa import content_thresholds
from marketplace.audit import actor_label
from marketplace.errors import Conflict, ServiceError, invalid
from marketplace.models import Membership
from marketplace.queueing import enqueue_on_commit
from marketplace.tenancy import Caller
from orders.models import Order

Remedy = Claim.Remedy
MAX_ITEMS = 1000
MIN_RANGE_SECONDS = Decimal(1)
CLAIM_ROLES = {
    Remedy.RECOLLECT: (Membership.Role.OWNER, Membership.Role.MEMBER),
    Remedy.CREDIT: (Membership.Role.OWNER, Membership.Role.BILLING),
}


class ClaimRecheckLater(Exception):
    """A delivery of the claim's order is being assembled: the re-check waits for it (its task
    retries this as a transient error)."""


class ClaimRoleRefused(ServiceError):
    status_code = 403
    code = ErrorCode.CLAIM_ROLE_REFUSED


@dataclass(frozen=True)
class ClaimedEpisode:
    episode_id: str
    reason_code: str
    start_seconds: Decimal | None = None
    end_seconds: Decimal | None = None
    note: str = ""


def claim_create(*, caller: Caller, delivery_id, remedy: str, items: list, note: str = "") -> Claim:
    """File a claim on delivered episodes (see the module); its re-check runs after commit."""
    if remedy not in Remedy.values:
        raise invalid("remedy", f"One of: {', '.join(Remedy.values)}.")
    if not caller.has_role(*CLAIM_ROLES[remedy]):
        raise ClaimRoleRefused(
            f"Your role ({caller.role}) may not claim {Remedy(remedy).label.lower()} episodes: "
            f"{' or '.join(CLAIM_ROLES[remedy])} only."
        )
    note = _text(note, "note")
    claimed = _parse_items(items, note)
    with transaction.atomic():
        delivery = customer_delivery(
            organization=caller.organization, delivery_id=delivery_id, lock=True
        )
        order = Order.objects.select_for_update().get(pk=delivery.order_id)
        _require_claimable(delivery, order)
        episodes = _claimable_episodes(delivery, claimed, remedy)
        claim = Claim.objects.create(
            order=order,
            delivery=delivery,
            remedy=remedy,
            note=note,
            actor_label=actor_label(caller),
        )
        ClaimItem.objects.bulk_create(
            [
                ClaimItem(
                    claim=claim,
                    episode=episodes[c.episode_id],
                    reason_code=c.reason_code,
                    start_seconds=c.start_seconds,
                    end_seconds=c.end_seconds,
                    note=c.note,
                    seconds=episodes[c.episode_id].duration_seconds,
                )
                for c in claimed
            ]
        )
        record_event(
            claim,
            ClaimEvent.Action.FILED,
            claim.actor_label,
            note=note,
            data={
                "episodes": len(claimed),
                "seconds": str(sum((e.duration_seconds for e in episodes.values()), Decimal(0))),
                "remedy": remedy,
            },
        )
        enqueue_on_commit("datasets.tasks.qa_claim_recheck", claim.id)
    return claim


def _text(value, field_name: str, limit: int = 2000) -> str:
    value = (value or "").strip()
    if "\x00" in value:
        raise invalid(field_name, "Null characters are not allowed.")
    if len(value) > limit:
        raise invalid(field_name, f"At most {limit} characters.")
    return value


def _parse_items(items, claim_note: str) -> list[ClaimedEpisode]:
    if not items or not isinstance(items, list) or len(items) > MAX_ITEMS:
        raise invalid("items", f"Name 1 to {MAX_ITEMS} delivered episodes.")
    parsed, errors = [], {}
    for index, raw in enumerate(items):
        try:
            parsed.append(_parse_item(raw, claim_note))
        except ServiceError as exc:
            errors[str(index)] = exc.fields or {"episode": [exc.message]}
    ids = [c.episode_id for c in parsed]
    if not errors and len(set(ids)) != len(ids):
        raise invalid("items", "Name each episode once.")
    if errors:
        raise ServiceError(
            "Not every claimed episode is valid.", fields={"items": dict(list(errors.items())[:50])}
        )
    return parsed


def _parse_item(raw, claim_note: str) -> ClaimedEpisode:
    if not isinstance(raw, dict):
        raise invalid("episode", "An object: episode, reason_code, start/end_seconds, note.")
    (episode_id,) = episode_uuids([raw.get("episode")]) if raw.get("episode") else [None]
    if episode_id is None:
        raise invalid("episode", "Name the episode.")
    reason = raw.get("reason_code")
    if reason not in ExclusionReason.values:
        raise invalid("reason_code", f"One of: {', '.join(ExclusionReason.values)}.")
    note = _text(raw.get("note"), "note")
    if reason == ExclusionReason.OTHER and not (note or claim_note):
        raise invalid("note", "Say why (the reason is 'other').")
    start, end = _seconds(raw.get("start_seconds")), _seconds(raw.get("end_seconds"))
    if (start is None) != (end is None):
        raise invalid("end_seconds", "Give both start_seconds and end_seconds, or neither.")
    if start is not None and (start < 0 or end - start < MIN_RANGE_SECONDS):
        raise invalid("end_seconds", f"A range from 0 s, at least {MIN_RANGE_SECONDS} s long.")
    return ClaimedEpisode(episode_id, reason, start, end, note)


def _seconds(value) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        seconds = Decimal(str(value))
    except InvalidOperation:
        raise invalid("start_seconds", "Seconds from the episode's start.") from None
    if not seconds.is_finite() or seconds > 10**8:
        raise invalid("start_seconds", "Seconds from the episode's start.")
    return seconds.quantize(Decimal("0.001"))


def _require_claimable(delivery: Delivery, order: Order) -> None:
    """The latest ready full delivery of a delivered order, in the window, nothing assembling
    and no other claim being re-checked (the caller holds the delivery's and order's locks)."""
    if delivery.kind != Delivery.Kind.FULL or delivery.status != Delivery.Status.READY:
        raise Conflict(
            "Only the episodes of a ready full delivery are claimed (a pilot is reviewed).",
            code=ErrorCode.DELIVERY_NOT_READY,
        )
    latest = latest_full_delivery(order)
    if delivery.superseded_at is not None or (latest is not None and latest.pk != delivery.pk):
        raise Conflict(
            f"Version {delivery.version} is replaced by a newer one: claim episodes there.",
            code=ErrorCode.DELIVERY_SUPERSEDED,
        )
    require_acceptance_window(delivery)
    if order.status != Order.Status.DELIVERED:
        raise Conflict(
            "The order is being collected again: claim once its next version is delivered.",
            code=ErrorCode.EXCLUSION_NOT_ALLOWED,
        )
    if Claim.objects.filter(order=order, status=Claim.Status.CHECKING).exists():
        raise Conflict(
            "Another claim of this order is being re-checked: file this one in a moment.",
            code=ErrorCode.CLAIM_IN_PROGRESS,
        )


def _claimable_episodes(delivery: Delivery, claimed, remedy: str) -> dict[str, Episode]:
    ids = [c.episode_id for c in claimed]
    held = set(delivery.episode_ids)
    outside = [i for i in ids if i not in held]
    if outside:
        raise invalid("items", f"Not in this delivery: {', '.join(outside[:5])}.")
    episodes = {
        str(e.id): e for e in Episode.objects.select_for_update().filter(pk__in=ids).order_by("pk")
    }
    if gone := [i for i in ids if episodes[i].status != Episode.Status.ACCEPTED]:
        raise Conflict(
            f"{len(gone)} of these episodes are no longer accepted (excluded or credited).",
            code=ErrorCode.EPISODE_NOT_ACCEPTED,
            fields={"items": gone[:20]},
        )
    if again := sorted(
        str(pk)
        for pk in ClaimItem.objects.filter(episode_id__in=ids).values_list("episode_id", flat=True)
    ):
        raise Conflict(
            f"{len(again)} of these episodes were claimed before: an episode is claimed once, "
            "whatever the version.",
            code=ErrorCode.EPISODE_ALREADY_CLAIMED,
            fields={"items": again[:20]},
        )
    for c in claimed:
        if c.end_seconds is not None and c.end_seconds > episodes[c.episode_id].duration_seconds:
            raise invalid("items", f"The range of {c.episode_id} ends after the episode does.")
    if (
        remedy == Remedy.RECOLLECT
        and Recollection.objects.filter(job_id__in={e.job_id for e in episodes.values()}).exists()
    ):
        raise Conflict(
            "Some of these episodes re-collect hours rejected before: they are not re-collected"
            " a second time (claim them for credit, or ask staff).",
            code=ErrorCode.RECOLLECTION_EXHAUSTED,
        )
    return episodes


# --- The re-check and the decision ---------------------------------------------------------


def claim_recheck(*, claim_id) -> Claim:
    """Re-check a filed claim and decide each episode: granted at once, or disputed. Safe to
    run again (a decided claim is left as it is). The files are read outside any transaction;
    the allowance is counted again under the order's lock."""
    claim = Claim.objects.select_related("order").get(pk=claim_id)
    if claim.status != Claim.Status.CHECKING:
        return claim
    pending = list(
        claim.items.filter(status=ClaimItem.Status.PENDING)
        .select_related("episode__job__embodiment")
        .order_by("id")
    )
    verdicts = _verdicts(pending, order_allowance(claim.order).left_seconds)
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=claim.order_id)
        claim = Claim.objects.select_for_update().get(pk=claim_id)
        if claim.status != Claim.Status.CHECKING:
            return claim
        if Delivery.objects.filter(order=order, status=Delivery.Status.ASSEMBLING).exists():
            raise ClaimRecheckLater(f"A delivery of order {order.id} is being assembled.")
        left = order_allowance(order).left_seconds
        granted, disputed = [], []
        for item in (
            claim.items.select_for_update(of=("self",))
            .filter(status=ClaimItem.Status.PENDING)
            .select_related("episode")
            .order_by("id")
        ):
            verdict = verdicts.get(item.pk)
            item.recheck = _recheck_value(verdict)
            item.recheck_detail = verdict.detail[:500] if verdict else ""
            item.route = _route(item, verdict, left)
            if item.route == GRANTED_AT_ONCE:
                left -= item.seconds
                granted.append(item)
            else:
                disputed.append(item)
        record_event(claim, ClaimEvent.Action.RECHECKED, SYSTEM, data=_recheck_summary(granted))
        if granted:
            items_grant(claim=claim, items=granted, actor=SYSTEM)
            record_event(
                claim,
                ClaimEvent.Action.GRANTED,
                SYSTEM,
                data={"episodes": [str(i.episode_id) for i in granted]},
            )
        ClaimItem.objects.bulk_update(granted, ["recheck", "recheck_detail", "route"])
        disputes_open(claim=claim, items=disputed)
        claim.status = Claim.Status.DISPUTED if disputed else Claim.Status.DECIDED
        claim.decided_at = None if disputed else timezone.now()
        claim.save(update_fields=["status", "decided_at"])
    return claim


GRANTED_AT_ONCE = "Granted at once: within the allowance and confirmed by the re-check."


def _route(item: ClaimItem, verdict, left: Decimal) -> str:
    if not claim_checks.auto_checkable(item.reason_code):
        return "Disputed: this reason needs a person to judge."
    if item.seconds > left:
        return "Disputed: beyond the order's rejection allowance."
    if verdict is None or not verdict.confirmed:
        return "Disputed: the automatic re-check did not confirm the reason."
    return GRANTED_AT_ONCE


def _recheck_value(verdict) -> str:
    if verdict is None:
        return ClaimItem.Recheck.NOT_RUN
    return ClaimItem.Recheck.CONFIRMED if verdict.confirmed else ClaimItem.Recheck.NOT_CONFIRMED


def _recheck_summary(granted) -> dict:
    return {"granted": len(granted), "granted_seconds": str(sum(i.seconds for i in granted))}


def _verdicts(items: list[ClaimItem], left: Decimal) -> dict:
    """The re-check of the items that could be granted at once: auto-checkable, in order, as
    long as they fit in what is left of the allowance (only those files are read)."""
    verdicts = {}
    for item in items:
        if not claim_checks.auto_checkable(item.reason_code) or item.seconds > left:
            continue
        verdict = _recheck_item(item)
        verdicts[item.pk] = verdict
        if verdict.confirmed:
            left -= item.seconds
    return verdicts


def _recheck_item(item: ClaimItem) -> claim_checks.Verdict:
    episode = item.episode
    thresholds = content_thresholds(episode.job.embodiment)
    has_range = item.start_seconds is not None
    if not claim_checks.needs_measuring(item.reason_code, has_range=has_range):
        measured = claim_checks.Measured.stored(
            success=episode.success,
            fps=episode.fps,
            idle_fraction=episode.idle_fraction,
            jerk=episode.jerk,
            measurements=episode.qa_measurements or {},
        )
        return claim_checks.recheck(item.reason_code, measured, thresholds)
    state, action = _episode_arrays(episode, item.start_seconds, item.end_seconds)
    if len(state) < 2:
        return claim_checks.Verdict(False, "The claimed range holds fewer than two frames.")
    report = check_content(state, action, fps=episode.fps, thresholds=thresholds)
    measured = claim_checks.Measured.of_report(report, success=episode.success, fps=episode.fps)
    verdict = claim_checks.recheck(item.reason_code, measured, thresholds)
    if has_range:
        where = f"from {item.start_seconds} s to {item.end_seconds} s"
        return claim_checks.Verdict(verdict.confirmed, f"{where}: {verdict.detail}")
    return verdict


def _episode_arrays(episode: Episode, start, end):
    """The state and action of the stored episode QA accepted, cut to [start, end) seconds."""
    reader = storage.RangeReader(episode.stored_key, size=episode.size_bytes)
    table = pq.ParquetFile(reader).read(columns=[STATE, ACTION])
    state, action = column_matrix(table.column(STATE)), column_matrix(table.column(ACTION))
    if start is not None:
        first, stop = int(start * episode.fps), int(end * episode.fps)
        state, action = state[first:stop], action[first:stop]
    return state, action


# --- Granting --------------------------------------------------------------------------------
