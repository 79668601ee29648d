"""Deliveries: open one when a phase is collected, assemble the LeRobot v3.0 dataset, tell the
customer (email, webhook), and the customer's pilot review."""

import hashlib
import tempfile
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.core.mail import mail_admins, send_mail
from django.db import transaction
from django.utils import timezone

from datasets import storage
from datasets.error_codes import ErrorCode
from datasets.lerobot import DATA_PATH, LeRobotWriter
from datasets.lerobot_videos import VIDEO_PATH, DatasetVideos, VideoAssemblyError
from datasets.models import (
    DELIVERY_TRANSITIONS,
    Delivery,
    DeliveryFile,
    Episode,
    EpisodeExclusion,
    ExclusionReason,
)
from datasets.packaging import (
    CALIBRATIONS_PATH,
    DatasetCardFacts,
    Provenance,
    QualityFacts,
    VideoFacts,
    upload_tree,
    write_delivery_files,
)
from datasets.services.delivery_versions import DeliveryFilters
from datasets.services.downloads import customer_delivery
from datasets.services.exclusions import episodes_exclude
from datasets.services.plan_delivery import PlanFacts, delivered_plan
from fleets.services.planning import order_release_remaining
from marketplace.audit import actor_label, system_label
from marketplace.errors import Conflict, invalid
from marketplace.models import Membership
from marketplace.queueing import enqueue_on_commit
from marketplace.services import organization_webhook_enqueue
from marketplace.tenancy import Caller
from marketplace.transitions import require_transition
from orders.models import Order
from orders.services import order_mark_delivered, order_resume_collection

SYSTEM = system_label("qa")


def _delivery_episodes(delivery: Delivery):
    episodes = Episode.objects.filter(order=delivery.order, status=Episode.Status.ACCEPTED)
    if delivery.kind == Delivery.Kind.PILOT:
        episodes = episodes.filter(job__is_pilot=True)
    episodes = DeliveryFilters.of(delivery).apply(episodes)
    episodes = episodes.select_related("site", "fleet", "scene").order_by("decided_at", "id")
    if (delivery.order.stream_spec or {}).get("cameras"):
        episodes = episodes.prefetch_related("videos")
    return episodes


@dataclass(frozen=True)
class Streams:
    """What the order's stream spec asks each episode to carry, as the delivery writes it
    ({} on older orders: state and action named joint_0.., no camera, no other vector)."""

    state_names: list[str]
    action_names: list[str]
    vectors: dict[str, list[str]]
    cameras: list[str]
    codec: str

    @classmethod
    def of(cls, order: Order) -> "Streams":
        spec = order.stream_spec or {}
        joints = [f"joint_{i}" for i in range(order.embodiment.action_dim)]
        return cls(
            state_names=list((spec.get("state") or {}).get("names") or joints),
            action_names=list((spec.get("action") or {}).get("names") or joints),
            vectors={v["key"]: list(v["names"]) for v in spec.get("vectors") or []},
            cameras=[c["key"] for c in spec.get("cameras") or []],
            codec=spec.get("video_codec") or "av1",
        )


def _write_dataset(
    root: Path, delivery: Delivery, episodes, fps: int, streams: Streams, plan: PlanFacts
):
    """The LeRobot v3.0 dataset under root: (writer, the cameras' summaries)."""
    writer = LeRobotWriter(
        root=root,
        fps=fps,
        robot_type=delivery.order.embodiment.slug,
        state_names=streams.state_names,
        action_names=streams.action_names,
        vector_names=streams.vectors,
        data_file_size_limit=settings.DELIVERY_DATA_FILE_BYTES,
        video_file_size_limit=settings.DELIVERY_VIDEO_FILE_BYTES,
    )
    videos = None
    if streams.cameras:
        videos = DatasetVideos(
            root=root,
            fps=fps,
            codec=streams.codec,
            keys=streams.cameras,
            file_size_limit=settings.DELIVERY_VIDEO_FILE_BYTES,
        )
    try:
        for episode in episodes:
            record = writer.add_episode(
                storage.RangeReader(episode.stored_key, size=episode.size_bytes),
                task=episode.task_instruction,
                extra=curation_columns(episode) | plan.columns(episode),
            )
            if videos is not None:
                record.extra.update(_episode_videos(videos, episode, record.length))
    except Exception:
        if videos is not None:
            videos.abort()
        raise
    if videos is None:
        writer.finish()
        return writer, []
    features, stats, summaries = videos.finish()
    writer.finish(video_features=features, video_stats=stats)
    return writer, summaries


def curation_columns(episode: Episode) -> dict:
    """The per-episode quality columns of meta/episodes (content QA's measurements; null for
    an episode checked before content QA) and the operator's pseudonym."""
    return {
        "quality_score": episode.quality_score,
        "idle_fraction": episode.idle_fraction,
        "jerk": episode.jerk,
        "operator": episode.operator,
    }


def _episode_videos(videos: DatasetVideos, episode: Episode, length: int) -> dict:
    """Download (streamed to temporary files) one episode's camera videos and append them."""
    stored = {video.camera_key: video for video in episode.videos.all()}
    with tempfile.TemporaryDirectory(prefix="episode-videos-") as tmp:
        paths = {}
        for number, key in enumerate(videos.cameras):
            video = stored.get(key)
            if video is None or not video.stored_key:
                raise VideoAssemblyError(f"Episode {episode.id} has no {key} video.")
            paths[key] = Path(tmp) / f"{number}.mp4"
            digest = hashlib.sha256()
            with paths[key].open("wb") as handle:
                for block in storage.stream(video.stored_key):
                    handle.write(block)
                    digest.update(block)
            if digest.hexdigest() != video.sha256:
                raise VideoAssemblyError(
                    f"Episode {episode.id}'s {key} video is not the one QA checked (SHA-256)."
                )
        return videos.add_episode(paths, length)


def _card_facts(
    delivery: Delivery, episodes: list[Episode], frames: int, fps: int
) -> DatasetCardFacts:
    order = delivery.order
    seconds = sum((e.duration_seconds for e in episodes), Decimal(0))
    decided = Episode.objects.filter(
        order=order, status__in=[Episode.Status.ACCEPTED, Episode.Status.REJECTED]
    )
    rejected = [e for e in decided if e.status == Episode.Status.REJECTED]
    reasons: dict[str, int] = {}
    for episode in rejected:
        for failure in episode.qa_failures:
            reasons[failure["code"]] = reasons.get(failure["code"], 0) + 1
    provenance: dict[tuple, list[Episode]] = {}
    for episode in episodes:
        provenance.setdefault(
            (episode.fleet.name, episode.site.name, episode.site.kind), []
        ).append(episode)
    return DatasetCardFacts(
        title=(
            f"{order.task_type.name}, {order.embodiment.name}"
            f" ({delivery.get_kind_display().lower()}"
            + (f", version {delivery.version})" if delivery.version > 1 else ")")
        ),
        task=order.task_type.name,
        embodiment=order.embodiment.name,
        robot_type=order.embodiment.slug,
        fps=fps,
        episodes=len(episodes),
        frames=frames,
        hours=(seconds / 3600).quantize(Decimal("0.001")),
        environments=len({e.site_id for e in episodes}),
        objects=len({name for e in episodes for name in e.objects_handled}),
        operators=len({e.operator for e in episodes}),
        success_rate=sum(e.success for e in episodes) / len(episodes),
        qa_accepted=len(episodes),
        qa_rejected=len(rejected),
        qa_rejections_by_reason=reasons,
        provenance=tuple(
            Provenance(
                fleet=fleet,
                site=site,
                site_kind=kind,
                episodes=len(items),
                hours=(sum((e.duration_seconds for e in items), Decimal(0)) / 3600).quantize(
                    Decimal("0.001")
                ),
            )
            for (fleet, site, kind), items in sorted(provenance.items())
        ),
        collected_from=min(e.created_at for e in episodes),
        collected_to=max(e.decided_at for e in episodes),
        order_id=str(order.id),
    )


def delivery_assemble(*, delivery_id) -> Delivery:
    """Write the LeRobot v3.0 dataset, card and manifest to storage. Safe to run again: a
    rerun rewrites the same keys from the same accepted episodes until it is marked ready."""
    delivery = Delivery.objects.select_related("order__task_type", "order__embodiment").get(
        pk=delivery_id
    )
    if delivery.status != Delivery.Status.ASSEMBLING:
        return delivery
    episodes = list(_delivery_episodes(delivery))
    if not episodes:
        return _delivery_fail(delivery, "No accepted episodes to deliver.")
    fps_values = {e.fps for e in episodes}
    if len(fps_values) > 1:
        return _delivery_fail(
            delivery, f"Episodes were recorded at several rates: {sorted(fps_values)}."
        )
    fps = fps_values.pop()
    streams = Streams.of(delivery.order)
    plan = PlanFacts.of(delivery.order, episodes)
    with tempfile.TemporaryDirectory(prefix="delivery-") as tmp:
        root = Path(tmp)
        try:
            writer, cameras = _write_dataset(root, delivery, episodes, fps, streams, plan)
        except VideoAssemblyError as exc:
            return _delivery_fail(delivery, f"A camera video cannot be delivered: {exc}")
        has_calibrations = plan.write_calibrations(root)
        facts = _card_facts(delivery, episodes, writer.total_frames, fps)
        facts = replace(
            facts,
            videos=tuple(VideoFacts.of(camera) for camera in cameras),
            vectors=tuple((key, tuple(names)) for key, names in streams.vectors.items()),
            quality=QualityFacts.of(
                [e.quality_score for e in episodes if e.quality_score is not None],
                [e.idle_fraction for e in episodes if e.idle_fraction is not None],
                [e.jerk for e in episodes if e.jerk is not None],
            ),
            version=delivery.version,
            filters=dict(delivery.filters or {}),
            plan=plan.grid,
            calibrations=plan.card_calibrations(),
        )
        extra = {"order": str(delivery.order_id), "delivery": str(delivery.id)}
        extra["kind"] = delivery.kind
        extra["dataset_version"] = delivery.version
        if delivery.previous_id:
            extra["previous_delivery"] = str(delivery.previous_id)
        if delivery.filters:
            extra["filters"] = delivery.filters
        if cameras:
            extra["videos"] = cameras
        if has_calibrations:
            extra["calibrations"] = {"path": CALIBRATIONS_PATH, "count": len(plan.calibrations)}
        if plan.grid is not None:
            extra["plan"] = {
                "environment_unit": plan.grid.unit,
                "environments": {
                    "planned": plan.grid.environments_planned,
                    "delivered": plan.grid.delivered.environments,
                },
                "distinct_objects": {
                    "planned": plan.grid.objects_planned,
                    "delivered": plan.grid.delivered.objects,
                },
            }
        manifest = write_delivery_files(root, facts, extra=extra)
        upload_tree(root, delivery.prefix)
        manifest_size = (root / "manifest.json").stat().st_size
    holds = files_holding(writer, episodes)
    return _delivery_ready(delivery, manifest, manifest_size, episodes, writer.total_frames, holds)


def files_holding(writer: LeRobotWriter, episodes) -> dict[str, list[str]]:
    """Which episodes' frames each data and video file holds (no link to a file once one of
    them is credited: datasets/services/downloads.py)."""
    holds: dict[str, list[str]] = {}
    for record, episode in zip(writer.episodes, episodes, strict=True):
        paths = [DATA_PATH.format(chunk_index=record.chunk_index, file_index=record.file_index)]
        for name, value in record.extra.items():
            if name.startswith("videos/") and name.endswith("/chunk_index"):
                key = name[len("videos/") : -len("/chunk_index")]
                file_index = record.extra[f"videos/{key}/file_index"]
                paths.append(
                    VIDEO_PATH.format(video_key=key, chunk_index=value, file_index=file_index)
                )
        for path in paths:
            holds.setdefault(path, []).append(str(episode.id))
    return holds


class InvalidDeliveryTransition(Conflict):
    code = ErrorCode.INVALID_DELIVERY_TRANSITION


def delivery_move(delivery: Delivery, to_status: str) -> Delivery:
    """Change a delivery's status by the map; the caller holds its row lock and saves it."""
    require_transition(
        transitions=DELIVERY_TRANSITIONS,
        from_status=delivery.status,
        to_status=to_status,
        what="A delivery",
        error=InvalidDeliveryTransition,
    )
    delivery.status = to_status
    return delivery


def _delivery_fail(delivery: Delivery, reason: str) -> Delivery:
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().get(pk=delivery.pk)
        if delivery.status != Delivery.Status.ASSEMBLING:
            return delivery
        delivery_move(delivery, Delivery.Status.FAILED)
        delivery.failure_reason = reason
        delivery.save(update_fields=["status", "failure_reason"])
    mail_admins(
        f"Delivery {delivery.id} failed", f"Order {delivery.order_id}: {reason}", fail_silently=True
    )
    return delivery


def _delivery_ready(
    delivery, manifest: dict, manifest_size: int, episodes, frames: int, holds: dict
) -> Delivery:
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().get(pk=delivery.pk)
        if delivery.status != Delivery.Status.ASSEMBLING:
            return delivery
        DeliveryFile.objects.filter(delivery=delivery).delete()
        DeliveryFile.objects.bulk_create(
            [
                DeliveryFile(
                    delivery=delivery,
                    path=f["path"],
                    size_bytes=f["size"],
                    sha256=f["sha256"],
                    episode_ids=holds.get(f["path"], []),
                )
                for f in manifest["files"]
            ]
            + [DeliveryFile(delivery=delivery, path="manifest.json", size_bytes=manifest_size)]
        )
        delivery_move(delivery, Delivery.Status.READY)
        delivery.ready_at = timezone.now()
        delivery.episodes = len(episodes)
        delivery.episode_ids = [str(e.id) for e in episodes]
        delivery.frames = frames
        delivery.seconds = sum((e.duration_seconds for e in episodes), Decimal(0))
        delivery.save()
        if delivery.kind == Delivery.Kind.FULL:
            # Planned orders tell billing the distinct environments and objects delivered
            # (the true-up credits those short of the plan).
            order = delivery.order
            order_mark_delivered(
                order_id=delivery.order_id,
                actor_label=SYSTEM,
                reason=f"Dataset delivered: {delivery.episodes} episodes, {delivery.seconds} s.",
                plan_delivered=delivered_plan(order).as_json() if order.cells_planned else None,
            )
        enqueue_on_commit("datasets.tasks.delivery_notify", delivery.id)
        _webhook_record(delivery)
    return delivery


def delivery_notify(*, delivery_id) -> int:
    """Tell the customer's owners and members by email that a delivery is ready, once: the row
    lock and `notified_at` make a repeated task (redelivery, delivery_sweep) send nothing."""
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(of=("self",))
            .select_related("order__organization")
            .get(pk=delivery_id)
        )
        if delivery.notified_at is not None or delivery.status != Delivery.Status.READY:
            return 0
        recipients = sorted(
            Membership.objects.filter(organization=delivery.order.organization)
            .exclude(user__email="")
            .values_list("user__email", flat=True)
        )
        what = (
            "pilot dataset (please review it)"
            if delivery.kind == Delivery.Kind.PILOT
            else "dataset"
        )
        sent = 0
        if recipients:
            sent = send_mail(
                subject=f"Your {what} for order {delivery.order_id} is ready"
                + (f" (version {delivery.version})" if delivery.version > 1 else ""),
                message=(
                    f"{delivery.episodes} episodes,"
                    f" {(delivery.seconds / 3600).quantize(Decimal('0.01'))} h.\n"
                    "Download it from the order's page or "
                    f"GET /api/v1/deliveries/{delivery.id}/files."
                ),
                from_email=None,
                recipient_list=recipients,
                fail_silently=True,
            )
        delivery.notified_at = timezone.now()
        delivery.save(update_fields=["notified_at"])
    return sent


def delivery_webhook_record(*, delivery_id) -> bool:
    """Record (once) the customer's `delivery.ready` event; it is sent after commit. For a
    ready delivery whose event a lost message never recorded (delivery_sweep)."""
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(of=("self",))
            .select_related("order__organization")
            .get(pk=delivery_id)
        )
        return _webhook_record(delivery)


def _webhook_record(delivery: Delivery) -> bool:
    """The caller holds the delivery's row lock."""
    organization = delivery.order.organization
    if delivery.webhook_attempted_at is not None or not organization.webhook_url:
        return False
    organization_webhook_enqueue(
        organization=organization,
        event_type="delivery.ready",
        data={
            "order": str(delivery.order_id),
            "delivery": str(delivery.id),
            "kind": delivery.kind,
            "version": delivery.version,
            "episodes": delivery.episodes,
            "seconds": str(delivery.seconds),
            "files": f"/api/v1/deliveries/{delivery.id}/files",
        },
    )
    delivery.webhook_attempted_at = timezone.now()
    delivery.save(update_fields=["webhook_attempted_at"])
    return True


def _check_codes(codes, recollect: bool) -> list[str]:
    codes = list(dict.fromkeys(codes or []))
    unknown = [c for c in codes if c not in ExclusionReason.values]
    if unknown:
        raise invalid("reason_codes", f"Unknown: {', '.join(map(str, unknown))}.")
    if recollect and not codes:
        raise invalid("reason_codes", "Name at least one reason to ask for re-collection.")
    return codes


def pilot_review(
    *,
    caller: Caller,
    delivery_id,
    approve: bool,
    reason: str = "",
    reason_codes=(),
    recollect: bool = False,
    episode_ids=(),
) -> Delivery:
    """The customer approves the pilot (the rest of the order is dispatched) or rejects it
    with a reason and reason codes: staff are told, and with `recollect` the pilot's episodes
    (all, or `episode_ids`) are excluded and collected again, then delivered as the pilot's
    next version for review."""
    with transaction.atomic():
        delivery = customer_delivery(
            organization=caller.organization, delivery_id=delivery_id, lock=True
        )
        _check_reviewable(delivery)
        if not approve and not reason.strip():
            raise invalid("reason", "Say why the pilot is rejected.")
        if "\x00" in reason:  # the web form passes it raw; PostgreSQL refuses it (was a 500)
            raise invalid("reason", "Null characters are not allowed.")
        codes = [] if approve else _check_codes(reason_codes, recollect)
        delivery.review = Delivery.Review.APPROVED if approve else Delivery.Review.REJECTED
        delivery.review_reason = reason.strip()
        delivery.review_codes = codes
        delivery.reviewed_at = timezone.now()
        delivery.save(update_fields=["review", "review_reason", "review_codes", "reviewed_at"])
        if approve:
            order_resume_collection(
                order_id=delivery.order_id,
                caller=caller,
                reason="Pilot approved; the rest of the order is dispatched.",
            )
            order_release_remaining(order_id=delivery.order_id, actor_label=actor_label(caller))
            return delivery
        if recollect:
            _pilot_recollect(caller, delivery, codes, episode_ids)
        transaction.on_commit(
            lambda: mail_admins(
                f"Pilot rejected for order {delivery.order_id}",
                f"Delivery {delivery.id} rejected by {actor_label(caller)}"
                f" ({', '.join(codes) or 'no code'}"
                f"{', re-collection asked' if recollect else ''}): {delivery.review_reason}",
                fail_silently=True,
            )
        )
    return delivery


def _check_reviewable(delivery: Delivery) -> None:
    if delivery.kind != Delivery.Kind.PILOT:
        raise Conflict("Only a pilot delivery is reviewed.", code=ErrorCode.NOT_A_PILOT)
    if delivery.status != Delivery.Status.READY:
        raise Conflict("The pilot is not ready yet.", code=ErrorCode.DELIVERY_NOT_READY)
    if delivery.superseded_at is not None:
        raise Conflict(
            f"Version {delivery.version} of this pilot is replaced by a newer one: review "
            "that one.",
            code=ErrorCode.DELIVERY_SUPERSEDED,
        )
    if delivery.review != Delivery.Review.PENDING:
        raise Conflict(
            f"This pilot was already {delivery.review}.", code=ErrorCode.ALREADY_REVIEWED
        )


def _pilot_recollect(caller: Caller, delivery: Delivery, codes: list[str], episode_ids) -> None:
    """Exclude the rejected pilot episodes (all of the pilot's, or the named ones, which must
    be this pilot's) so they are collected again."""
    pilot = Episode.objects.filter(
        order_id=delivery.order_id, job__is_pilot=True, status=Episode.Status.ACCEPTED
    )
    ids = [str(pk) for pk in (episode_ids or pilot.values_list("pk", flat=True))]
    if episode_ids and pilot.filter(pk__in=ids).count() != len(set(ids)):
        raise invalid("episodes", "Name accepted episodes of this pilot.")
    episodes_exclude(
        caller=caller,
        order_id=delivery.order_id,
        episode_ids=ids,
        reason_code=codes[0],
        note=delivery.review_reason,
        scope=EpisodeExclusion.Scope.PILOT_REVIEW,
    )
