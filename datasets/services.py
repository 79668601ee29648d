"""Writes for episodes: registration, upload URLs, completion, QA decisions and accrual.

Locks are taken in the order episode -> order -> job (fleets takes order -> job), so
concurrent QA decisions on one order serialize on the order row and never lose an update.
"""

import re
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_DOWN, Decimal
from pathlib import Path

from django.conf import settings
from django.core.mail import mail_admins, send_mail
from django.db import transaction
from django.utils import timezone

from datasets import storage
from datasets.lerobot import LeRobotWriter
from datasets.models import Delivery, DeliveryFile, DownloadEvent, Episode
from datasets.packaging import DatasetCardFacts, Provenance, upload_tree, write_delivery_files
from datasets.qa import EpisodeExpectation, QAResult, check_stored_episode
from fleets import services as fleet_services
from fleets.models import Job, Robot
from marketplace.errors import Conflict, NotFound, ServiceError, ServiceUnavailable
from marketplace.models import Membership, Organization
from marketplace.queueing import enqueue_or_leave_to_sweeper
from marketplace.tenancy import Caller
from orders.models import Order
from orders.services import order_transition

SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
OPERATOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
WORKING_JOB_STATES = (Job.Status.ASSIGNED, Job.Status.IN_PROGRESS)
SYSTEM = "system:qa"


def _invalid(field_name: str, message: str, code: str = "invalid") -> ServiceError:
    return ServiceError(message, code=code, fields={field_name: [message]})


@dataclass(frozen=True)
class EpisodeRegistration:
    site_id: uuid.UUID
    robot_id: uuid.UUID
    operator: str
    task_instruction: str
    success: bool
    fps: int
    size_bytes: int
    sha256: str
    objects_handled: tuple[str, ...] = ()


@dataclass(frozen=True)
class UploadPart:
    part_number: int
    url: str
    headers: dict[str, str]


@dataclass(frozen=True)
class UploadInstructions:
    """How to send the bytes: one PUT, or multipart parts then `complete` with their ETags."""

    method: str  # "single" or "multipart"
    expires_at: datetime
    url: str = ""
    headers: dict | None = None
    part_size: int = 0
    parts: tuple[UploadPart, ...] = ()


def _upload_key(episode: Episode) -> str:
    attempt = uuid.uuid4().hex[:12]
    return (
        f"orders/{episode.order_id}/jobs/{episode.job_id}/episodes/{episode.id}/"
        f"upload-{attempt}.parquet"
    )


def stored_key_for(episode: Episode) -> str:
    return f"orders/{episode.order_id}/jobs/{episode.job_id}/episodes/{episode.id}/episode.parquet"


def _validate(registration: EpisodeRegistration) -> None:
    if not OPERATOR.match(registration.operator or ""):
        raise _invalid("operator", "A pseudonym of 1-64 letters, digits, '.', '_' or '-'.")
    if not (registration.task_instruction or "").strip():
        raise _invalid("task_instruction", "Say what the operator was asked to do.")
    if not (1 <= registration.fps <= settings.EPISODE_MAX_FPS):
        raise _invalid("fps", f"Between 1 and {settings.EPISODE_MAX_FPS}.")
    if not (1 <= registration.size_bytes <= settings.EPISODE_MAX_BYTES):
        raise _invalid("size_bytes", f"Between 1 and {settings.EPISODE_MAX_BYTES} bytes.")
    if not SHA256_HEX.match(registration.sha256 or ""):
        raise _invalid("sha256", "64 lowercase hexadecimal characters (SHA-256 of the file).")
    if len(registration.objects_handled) > 50 or any(
        not (1 <= len(name) <= 100) for name in registration.objects_handled
    ):
        raise _invalid("objects_handled", "Up to 50 object names of 1-100 characters.")


def episode_register(
    *, organization: Organization, job_id, registration: EpisodeRegistration
) -> tuple[Episode, UploadInstructions]:
    """A fleet announces an episode of a job it holds and gets where to upload it."""
    _validate(registration)
    job = (
        Job.objects.select_related("fleet", "site")
        .filter(pk=job_id, fleet__organization=organization)
        .first()
    )
    if job is None:
        raise NotFound("Job not found.")
    if job.status not in WORKING_JOB_STATES:
        raise Conflict(
            f"Episodes are taken only for assigned jobs; this one is {job.status}.",
            code="job_not_active",
        )
    if registration.site_id != job.site_id:
        raise _invalid("site", "Episodes of this job are collected at the job's site.")
    # One dataset has one frame rate: the order's first episode sets it.
    other_fps = (
        Episode.objects.filter(order_id=job.order_id)
        .exclude(fps=registration.fps)
        .values_list("fps", flat=True)
        .first()
    )
    if other_fps is not None:
        raise _invalid("fps", f"This order's episodes are recorded at {other_fps} fps.")
    robot = Robot.objects.filter(pk=registration.robot_id, site_id=job.site_id).first()
    if robot is None:
        raise _invalid("robot", "Not a robot of the job's site.")
    if robot.embodiment_id != job.embodiment_id:
        raise _invalid("robot", "This robot's embodiment is not the one the order asks for.")
    with transaction.atomic():
        # Registering is also a heartbeat: the job is being worked on.
        fleet_services.job_report_progress(organization=organization, job_id=job.id)
        episode = Episode(
            job=job,
            order_id=job.order_id,
            fleet_id=job.fleet_id,
            site_id=job.site_id,
            robot=robot,
            operator=registration.operator,
            task_instruction=registration.task_instruction.strip(),
            success=registration.success,
            objects_handled=sorted(set(registration.objects_handled)),
            fps=registration.fps,
            size_bytes=registration.size_bytes,
            sha256=registration.sha256,
        )
        episode.upload_key = _upload_key(episode)
        instructions = _upload_instructions(episode)
        episode.save(force_insert=True)
    return episode, instructions


def _storage_unavailable(exc: Exception) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"Storage cannot be reached right now; nothing was changed, try again shortly. ({exc})",
        code="storage_unavailable",
    )


def _upload_instructions(episode: Episode) -> UploadInstructions:
    try:
        return _upload_instructions_from_storage(episode)
    except storage.StorageError as exc:  # storage refused or is down: not the caller's fault
        raise _storage_unavailable(exc) from exc


def _upload_instructions_from_storage(episode: Episode) -> UploadInstructions:
    expires_in = settings.S3_UPLOAD_URL_EXPIRY_SECONDS
    expires_at = timezone.now() + timezone.timedelta(seconds=expires_in)
    if episode.size_bytes < settings.EPISODE_MULTIPART_THRESHOLD_BYTES:
        request = storage.presigned_put(
            key=episode.upload_key,
            content_length=episode.size_bytes,
            sha256_hex=episode.sha256,
            expires_in=expires_in,
        )
        episode.multipart_upload_id = ""
        return UploadInstructions(
            method="single", expires_at=expires_at, url=request.url, headers=request.headers
        )
    part_size = settings.EPISODE_MULTIPART_PART_BYTES
    episode.multipart_upload_id = storage.multipart_start(key=episode.upload_key)
    parts = []
    for index, start in enumerate(range(0, episode.size_bytes, part_size), start=1):
        length = min(part_size, episode.size_bytes - start)
        request = storage.presigned_part_put(
            key=episode.upload_key,
            upload_id=episode.multipart_upload_id,
            part_number=index,
            content_length=length,
            expires_in=expires_in,
        )
        parts.append(UploadPart(part_number=index, url=request.url, headers=request.headers))
    return UploadInstructions(
        method="multipart", expires_at=expires_at, part_size=part_size, parts=tuple(parts)
    )


def _own_episode_locked(*, organization: Organization, episode_id) -> Episode:
    episode = (
        Episode.objects.select_for_update()
        .filter(pk=episode_id, fleet__organization=organization)
        .first()
    )
    if episode is None:
        raise NotFound("Episode not found.")
    return episode


def episode_renew_upload(*, organization: Organization, episode_id) -> UploadInstructions:
    """New upload URL(s), to a fresh key, while the episode still waits for its bytes."""
    with transaction.atomic():
        episode = _own_episode_locked(organization=organization, episode_id=episode_id)
        if episode.status != Episode.Status.REGISTERED:
            raise Conflict(
                f"This episode is {episode.status}: its file can no longer change.",
                code="episode_not_awaiting_upload",
            )
        episode.upload_key = _upload_key(episode)
        instructions = _upload_instructions(episode)
        episode.save(update_fields=["upload_key", "multipart_upload_id"])
    return instructions


def episode_complete(
    *, organization: Organization, episode_id, parts: list[dict] | None = None
) -> Episode:
    """The fleet says the bytes are up: finish a multipart upload if any, queue QA."""
    with transaction.atomic():
        episode = _own_episode_locked(organization=organization, episode_id=episode_id)
        if episode.status != Episode.Status.REGISTERED:
            return episode  # completing twice is harmless
        if episode.multipart_upload_id:
            if not parts:
                raise _invalid("parts", "A multipart upload completes with its parts and ETags.")
            try:
                storage.multipart_complete(
                    key=episode.upload_key,
                    upload_id=episode.multipart_upload_id,
                    parts=[{"PartNumber": p["part_number"], "ETag": p["etag"]} for p in parts],
                )
            except storage.StorageUnavailable as exc:
                raise _storage_unavailable(exc) from exc
            except storage.StorageError as exc:
                raise _invalid(
                    "parts", f"The storage refused to complete the upload: {exc}"
                ) from exc
        episode.status = Episode.Status.UPLOADED
        episode.uploaded_at = timezone.now()
        episode.save(update_fields=["status", "uploaded_at"])
        transaction.on_commit(lambda: _enqueue_qa(episode.id))
    return episode


def _enqueue_qa(episode_id) -> None:
    from datasets import tasks

    # Broker down: the episode stays "uploaded" and qa_sweep queues its QA later.
    enqueue_or_leave_to_sweeper(tasks.qa_episode, str(episode_id))


# --- QA --------------------------------------------------------------------------------------


def episode_expectation(episode: Episode) -> EpisodeExpectation:
    return EpisodeExpectation(
        size=episode.size_bytes,
        sha256_hex=episode.sha256,
        fps=episode.fps,
        action_dim=episode.job.embodiment.action_dim,
        min_duration_seconds=settings.EPISODE_MIN_SECONDS,
        max_duration_seconds=settings.EPISODE_MAX_SECONDS,
    )


def episode_run_qa(*, episode_id) -> Episode:
    """Check an uploaded episode and record the decision. Safe to run again at any time."""
    episode = Episode.objects.select_related("job__embodiment").get(pk=episode_id)
    if episode.status != Episode.Status.UPLOADED:
        return episode
    stored_key = stored_key_for(episode)
    if not storage.exists(stored_key):
        try:
            storage.copy(source_key=episode.upload_key, dest_key=stored_key)
        except storage.ObjectMissing:
            result = QAResult()
            result.fail("object_missing", "No file was uploaded for this episode.")
            return episode_record_qa(episode_id=episode.id, result=result, stored_key="")
    result = check_stored_episode(stored_key, episode_expectation(episode))
    return episode_record_qa(episode_id=episode.id, result=result, stored_key=stored_key)


def episode_record_qa(*, episode_id, result: QAResult, stored_key: str) -> Episode:
    """Lock, check it is still undecided, record; accepted time accrues to job and order."""
    with transaction.atomic():
        episode = Episode.objects.select_for_update().get(pk=episode_id)
        if episode.status != Episode.Status.UPLOADED:
            return episode
        episode.qa_runs += 1
        episode.qa_failures = [failure.as_json() for failure in result.failures]
        episode.qa_bytes_read = result.bytes_read + result.checksum_bytes_read
        episode.frames = result.frames or None
        episode.stored_key = stored_key
        episode.decided_at = timezone.now()
        if not result.passed:
            episode.status = Episode.Status.REJECTED
            episode.save()
            return episode
        episode.status = Episode.Status.ACCEPTED
        episode.duration_seconds = result.duration_seconds
        episode.save()
        _accrue(episode)
    return episode


def _accrue(episode: Episode) -> None:
    """Add an accepted episode's time to its order and job (both rows locked here)."""
    seconds = episode.duration_seconds
    # FOR NO KEY UPDATE: only non-key columns change, so inserting episodes (whose foreign keys
    # take a KEY SHARE lock on these rows) is not blocked; that block, with registration
    # holding the job, was a deadlock.
    order = Order.objects.select_for_update(no_key=True).get(pk=episode.order_id)
    job = Job.objects.select_for_update(no_key=True).get(pk=episode.job_id)
    order.accepted_seconds += seconds
    order.accepted_hours = (order.accepted_seconds / 3600).quantize(
        Decimal("0.01"), rounding=ROUND_DOWN
    )
    order.save(update_fields=["accepted_seconds", "accepted_hours", "updated_at"])
    job.accepted_seconds += seconds
    job.save(update_fields=["accepted_seconds", "updated_at"])
    if job.status in WORKING_JOB_STATES and job.accepted_seconds >= job.target_hours * 3600:
        fleet_services.job_transition(
            job_id=job.id,
            to_status=Job.Status.COMPLETED,
            reason=f"{job.accepted_seconds} s accepted of {job.target_hours} h.",
            actor_label=SYSTEM,
        )
        _advance_order_if_collected(order)


def _advance_order_if_collected(order: Order) -> None:
    """All jobs of the current phase complete: the order goes to review (pilot or full)."""
    if order.status != Order.Status.IN_COLLECTION:
        return
    jobs = Job.objects.filter(order=order).exclude(status=Job.Status.CANCELLED)
    pending = jobs.exclude(status__in=[Job.Status.COMPLETED, Job.Status.HELD])
    if pending.exists():
        return
    held = jobs.filter(status=Job.Status.HELD).exists()
    reason = "Pilot collected; waiting for its review." if held else "All jobs collected."
    order_transition(
        order_id=order.id, to_status=Order.Status.IN_REVIEW, actor_label=SYSTEM, reason=reason
    )
    delivery_start(order_id=order.id, kind=Delivery.Kind.PILOT if held else Delivery.Kind.FULL)


# --- Deliveries -------------------------------------------------------------------------------


def delivery_start(*, order_id, kind: str) -> Delivery:
    """Open (once) the delivery of an order's pilot or full dataset; assembly runs after commit."""
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        existing = (
            Delivery.objects.filter(order=order, kind=kind)
            .exclude(status=Delivery.Status.FAILED)
            .first()
        )
        if existing is not None:
            return existing
        delivery = Delivery(order=order, kind=kind)
        delivery.prefix = f"deliveries/{order.id}/{delivery.id}"
        if kind == Delivery.Kind.PILOT:
            delivery.review = Delivery.Review.PENDING
        delivery.save(force_insert=True)
        transaction.on_commit(lambda: _enqueue("delivery_assemble", delivery.id))
    return delivery


def _enqueue(task_name: str, object_id) -> None:
    from datasets import tasks

    # Broker down: an assembling delivery is queued again by delivery_sweep.
    enqueue_or_leave_to_sweeper(getattr(tasks, task_name), str(object_id))


def _delivery_episodes(delivery: Delivery):
    episodes = Episode.objects.filter(order=delivery.order, status=Episode.Status.ACCEPTED)
    if delivery.kind == Delivery.Kind.PILOT:
        episodes = episodes.filter(job__is_pilot=True)
    return episodes.select_related("site", "fleet").order_by("decided_at", "id")


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
            f" ({delivery.get_kind_display().lower()})"
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
    names = [f"joint_{i}" for i in range(delivery.order.embodiment.action_dim)]
    with tempfile.TemporaryDirectory(prefix="delivery-") as tmp:
        root = Path(tmp)
        writer = LeRobotWriter(
            root=root,
            fps=fps,
            robot_type=delivery.order.embodiment.slug,
            state_names=names,
            action_names=names,
            data_file_size_limit=settings.DELIVERY_DATA_FILE_BYTES,
        )
        for episode in episodes:
            writer.add_episode(
                storage.RangeReader(episode.stored_key, size=episode.size_bytes),
                task=episode.task_instruction,
            )
        writer.finish()
        manifest = write_delivery_files(
            root,
            _card_facts(delivery, episodes, writer.total_frames, fps),
            extra={
                "order": str(delivery.order_id),
                "delivery": str(delivery.id),
                "kind": delivery.kind,
            },
        )
        upload_tree(root, delivery.prefix)
        manifest_size = (root / "manifest.json").stat().st_size
    return _delivery_ready(delivery, manifest, manifest_size, episodes, writer.total_frames)


def _delivery_fail(delivery: Delivery, reason: str) -> Delivery:
    Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.ASSEMBLING).update(
        status=Delivery.Status.FAILED, failure_reason=reason
    )
    mail_admins(
        f"Delivery {delivery.id} failed", f"Order {delivery.order_id}: {reason}", fail_silently=True
    )
    delivery.refresh_from_db()
    return delivery


def _delivery_ready(
    delivery, manifest: dict, manifest_size: int, episodes, frames: int
) -> Delivery:
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().get(pk=delivery.pk)
        if delivery.status != Delivery.Status.ASSEMBLING:
            return delivery
        DeliveryFile.objects.filter(delivery=delivery).delete()
        DeliveryFile.objects.bulk_create(
            [
                DeliveryFile(
                    delivery=delivery, path=f["path"], size_bytes=f["size"], sha256=f["sha256"]
                )
                for f in manifest["files"]
            ]
            + [DeliveryFile(delivery=delivery, path="manifest.json", size_bytes=manifest_size)]
        )
        delivery.status = Delivery.Status.READY
        delivery.ready_at = timezone.now()
        delivery.episodes = len(episodes)
        delivery.frames = frames
        delivery.seconds = sum((e.duration_seconds for e in episodes), Decimal(0))
        delivery.save()
        if delivery.kind == Delivery.Kind.FULL:
            order_transition(
                order_id=delivery.order_id,
                to_status=Order.Status.DELIVERED,
                actor_label=SYSTEM,
                reason=f"Dataset delivered: {delivery.episodes} episodes, {delivery.seconds} s.",
            )
        transaction.on_commit(lambda: _enqueue("delivery_notify", delivery.id))
        if delivery.order.organization.webhook_url:
            transaction.on_commit(lambda: _enqueue("delivery_webhook", delivery.id))
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
                subject=f"Your {what} for order {delivery.order_id} is ready",
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


def delivery_webhook_send(*, delivery_id):
    """POST `delivery.ready` to the customer's webhook, signed like fleet webhooks."""
    from fleets import webhooks

    delivery = Delivery.objects.select_related("order__organization").get(pk=delivery_id)
    organization = delivery.order.organization
    if delivery.webhook_attempted_at is None:
        Delivery.objects.filter(pk=delivery.pk, webhook_attempted_at__isnull=True).update(
            webhook_attempted_at=timezone.now()
        )
    if not organization.webhook_url:
        return None
    return webhooks.post(
        url=organization.webhook_url,
        secret=organization.webhook_secret,
        event_type="delivery.ready",
        delivery_id=str(delivery.id),
        payload={
            "type": "delivery.ready",
            "data": {
                "order": str(delivery.order_id),
                "delivery": str(delivery.id),
                "kind": delivery.kind,
                "episodes": delivery.episodes,
                "seconds": str(delivery.seconds),
                "files": f"/api/v1/deliveries/{delivery.id}/files",
            },
        },
        timeout=10,
    )


def _customer_delivery(*, organization: Organization, delivery_id, lock: bool = False) -> Delivery:
    deliveries = Delivery.objects.filter(pk=delivery_id, order__organization=organization)
    if lock:
        deliveries = deliveries.select_for_update()
    delivery = deliveries.first()
    if delivery is None:
        raise NotFound("Delivery not found.")
    return delivery


@dataclass(frozen=True)
class DownloadLink:
    url: str
    expires_at: datetime
    event: DownloadEvent


def delivery_download_link(
    *, caller: Caller, delivery_id, path: str, ip_address: str | None, user_agent: str
) -> DownloadLink:
    """A freshly signed GET for one file of a ready, unrevoked delivery, recorded first."""
    delivery = _customer_delivery(organization=caller.organization, delivery_id=delivery_id)
    if delivery.is_revoked:
        raise Conflict(
            "This delivery was revoked: no new links are issued.", code="delivery_revoked"
        )
    if delivery.status != Delivery.Status.READY:
        raise Conflict("This delivery is not ready yet.", code="delivery_not_ready")
    # No stored path holds a NUL byte, and PostgreSQL refuses one in a query (it was a 500).
    if "\x00" in path or not DeliveryFile.objects.filter(delivery=delivery, path=path).exists():
        raise NotFound("No such file in this delivery.", fields={"path": ["Not in the manifest."]})
    expires_in = settings.DELIVERY_LINK_EXPIRY_SECONDS
    event = DownloadEvent.objects.create(
        delivery=delivery,
        path=path,
        actor_label=_actor_label(caller),
        user=caller.user,
        api_key=caller.api_key,
        ip_address=ip_address,
        user_agent="".join(c for c in user_agent or "" if c.isprintable())[:300],  # no NUL
        link_expires_at=timezone.now() + timezone.timedelta(seconds=expires_in),
    )
    url = storage.presigned_get(
        key=f"{delivery.prefix}/{path}",
        expires_in=expires_in,
        download_name=path.rsplit("/", 1)[-1],
    )
    return DownloadLink(url=url, expires_at=event.link_expires_at, event=event)


def _actor_label(caller: Caller) -> str:
    if caller.user is not None:
        return f"user:{caller.user.get_username()}"
    if caller.api_key is not None:
        return f"api_key:{caller.api_key.prefix}"
    return "system"


def delivery_revoke(
    *, delivery_id, caller: Caller | None = None, staff_label: str = ""
) -> Delivery:
    """Stop new links at once (links already issued expire within minutes). Owners or staff."""
    with transaction.atomic():
        if caller is not None:
            delivery = _customer_delivery(
                organization=caller.organization, delivery_id=delivery_id, lock=True
            )
            label = _actor_label(caller)
        else:
            delivery = Delivery.objects.select_for_update().get(pk=delivery_id)
            label = staff_label or "staff"
        if delivery.revoked_at is None:
            delivery.revoked_at = timezone.now()
            delivery.revoked_by = label
            delivery.save(update_fields=["revoked_at", "revoked_by"])
    return delivery


def pilot_review(*, caller: Caller, delivery_id, approve: bool, reason: str = "") -> Delivery:
    """The customer approves the pilot (the rest of the order is dispatched) or rejects it
    (the reason is kept and staff are told; they settle the order with the customer)."""
    with transaction.atomic():
        delivery = _customer_delivery(
            organization=caller.organization, delivery_id=delivery_id, lock=True
        )
        if delivery.kind != Delivery.Kind.PILOT:
            raise Conflict("Only a pilot delivery is reviewed.", code="not_a_pilot")
        if delivery.status != Delivery.Status.READY:
            raise Conflict("The pilot is not ready yet.", code="delivery_not_ready")
        if delivery.review != Delivery.Review.PENDING:
            raise Conflict(f"This pilot was already {delivery.review}.", code="already_reviewed")
        if not approve and not reason.strip():
            raise _invalid("reason", "Say why the pilot is rejected.")
        if "\x00" in reason:  # the web form passes it raw; PostgreSQL refuses it (was a 500)
            raise _invalid("reason", "Null characters are not allowed.")
        delivery.review = Delivery.Review.APPROVED if approve else Delivery.Review.REJECTED
        delivery.review_reason = reason.strip()
        delivery.reviewed_at = timezone.now()
        delivery.save(update_fields=["review", "review_reason", "reviewed_at"])
        if approve:
            order_transition(
                order_id=delivery.order_id,
                to_status=Order.Status.IN_COLLECTION,
                caller=caller,
                reason="Pilot approved; the rest of the order is dispatched.",
            )
            fleet_services.order_release_remaining(
                order_id=delivery.order_id, actor_label=_actor_label(caller)
            )
        else:
            transaction.on_commit(
                lambda: mail_admins(
                    f"Pilot rejected for order {delivery.order_id}",
                    f"Delivery {delivery.id} rejected by {_actor_label(caller)}:"
                    f" {delivery.review_reason}",
                    fail_silently=True,
                )
            )
    return delivery
