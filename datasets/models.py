"""Episodes: what fleets record, upload straight to object storage, and QA decides on."""

import uuid
from decimal import Decimal

from django.db import models

from datasets.claim_models import (  # noqa: F401 (models of this app)
    DISPUTE_TRANSITIONS,
    Claim,
    ClaimEvent,
    ClaimItem,
    Dispute,
    Recollection,
    Remedy,
)
from datasets.duplicate_models import (  # noqa: F401
    EpisodeFingerprint,
    EpisodeTrajectory,
    EpisodeVideoFingerprint,
    EpisodeVideoSignature,
)
from fleets.models import Fleet, Job, Operator, OrderCell, Robot, Scene, Site
from marketplace.audit import AppendOnlyModel, actor_label
from orders.models import Order


class Episode(models.Model):
    class Status(models.TextChoices):
        REGISTERED = "registered", "Registered (waiting for the upload)"
        UPLOADED = "uploaded", "Uploaded (QA queued)"
        ACCEPTED = "accepted", "Accepted"
        REJECTED = "rejected", "Rejected"
        # Accepted, then excluded by the customer or staff (datasets/services/exclusions.py):
        # no longer counted, paid or delivered; its file still counts as seen (duplicates).
        EXCLUDED = "excluded", "Excluded"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="episodes")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="episodes")
    fleet = models.ForeignKey(Fleet, on_delete=models.PROTECT, related_name="episodes")
    site = models.ForeignKey(Site, on_delete=models.PROTECT, related_name="episodes")
    robot = models.ForeignKey(Robot, on_delete=models.PROTECT, related_name="episodes")
    operator = models.CharField(max_length=64)  # a pseudonym, never a person's name
    # The fleet's registered operator of that pseudonym (None: the fleet registers none).
    registered_operator = models.ForeignKey(
        Operator, null=True, blank=True, on_delete=models.PROTECT, related_name="episodes"
    )
    task_instruction = models.CharField(max_length=500)
    success = models.BooleanField()
    objects_handled = models.JSONField(default=list, blank=True)
    # The collection plan (issue 30): the scene recorded in (one of the site's), the
    # calibration in force per camera ({camera: CameraCalibration id}) and, once accepted,
    # the order's (environment, object) cell it counts in.
    scene = models.ForeignKey(
        Scene, null=True, blank=True, on_delete=models.PROTECT, related_name="episodes"
    )
    camera_calibrations = models.JSONField(default=dict, blank=True)
    cell = models.ForeignKey(
        OrderCell, null=True, blank=True, on_delete=models.PROTECT, related_name="episodes"
    )
    fps = models.PositiveSmallIntegerField()
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    # A multipart upload (from EPISODE_MULTIPART_THRESHOLD_BYTES) is cut in parts of
    # `part_bytes` (the platform's EPISODE_MULTIPART_PART_BYTES when registered). The fleet may
    # declare each part's SHA-256 (hex, `part_sha256s`): each part URL is then signed with its
    # checksum and a store that keeps checksums proves the bytes are those parts, so QA does
    # not stream the file. `parts_sha256` (hex sha256 of the part digests, what S3's composite
    # checksum encodes) is the verified identity of a multipart file, set by QA from the
    # store's composite or from its own stream; duplicates are found by it as by `sha256`.
    part_bytes = models.PositiveIntegerField(default=0)  # 0: a single PUT
    part_sha256s = models.JSONField(default=list, blank=True)
    parts_sha256 = models.CharField(max_length=64, blank=True)

    # Where the bytes are. `upload_key` is fresh for every upload URL handed out; on completion
    # QA first copies it to `stored_key`, for which no upload URL ever exists, so nothing a
    # fleet sends later can change what was checked and accepted.
    upload_key = models.CharField(max_length=400)
    multipart_upload_id = models.CharField(max_length=400, blank=True)
    upload_expires_at = models.DateTimeField(null=True, blank=True)  # of the latest upload URLs
    stored_key = models.CharField(max_length=400, blank=True)

    status = models.CharField(max_length=20, choices=Status.choices, default=Status.REGISTERED)
    qa_failures = models.JSONField(default=list, blank=True)  # [{"code", "message"}]
    qa_bytes_read = models.BigIntegerField(null=True, blank=True)
    qa_runs = models.PositiveIntegerField(default=0)
    # A QA run in progress (set when it starts, cleared when it decides or fails transiently);
    # a run that never finished (its worker died) counts in qa_unfinished_runs, and after
    # EPISODE_QA_MAX_ATTEMPTS of them the episode is rejected instead of looping.
    qa_started_at = models.DateTimeField(null=True, blank=True)
    qa_unfinished_runs = models.PositiveSmallIntegerField(default=0)
    # Frames the fleet declared at registration (QA checks the file has exactly these), so a
    # job's in-flight episodes are bounded by its remaining time before any byte is sent.
    declared_frames = models.PositiveIntegerField(null=True, blank=True)
    frames = models.PositiveIntegerField(null=True, blank=True)
    duration_seconds = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    # Content QA (datasets/qa_content.py): the score in [0, 1], what it was computed from, and
    # the trajectory's two fingerprints (near-duplicates: an indexed equality lookup).
    quality_score = models.FloatField(null=True, blank=True)
    idle_fraction = models.FloatField(null=True, blank=True)
    jerk = models.FloatField(null=True, blank=True)  # RMS, state units / s^3
    qa_measurements = models.JSONField(default=dict, blank=True)
    content_fingerprint = models.CharField(max_length=32, blank=True)
    content_fingerprint_alt = models.CharField(max_length=32, blank=True)
    # Rejected `near_duplicate`: the accepted episode it repeats (shown to staff only: it may
    # be another fleet's or customer's).
    near_duplicate_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    uploaded_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(size_bytes__gt=0), name="episode_size_positive"
            ),
            models.CheckConstraint(condition=models.Q(fps__gt=0), name="episode_fps_positive"),
            models.CheckConstraint(
                condition=~models.Q(status="accepted")
                | models.Q(duration_seconds__gt=0, frames__gt=0),
                name="episode_accepted_has_duration",
            ),
            # The same file is paid and delivered once per order.
            models.UniqueConstraint(
                fields=["order", "sha256"],
                condition=models.Q(status="accepted"),
                name="episode_accepted_once_per_order",
            ),
            models.UniqueConstraint(
                fields=["order", "parts_sha256"],
                condition=models.Q(status="accepted") & ~models.Q(parts_sha256=""),
                name="episode_parts_accepted_once_per_order",
            ),
        ]
        indexes = [
            models.Index(fields=["order", "status"]),
            models.Index(fields=["job", "status"]),
            models.Index(
                fields=["content_fingerprint"],
                condition=models.Q(status="accepted"),
                name="episode_fingerprint_accepted",
            ),
            models.Index(
                fields=["content_fingerprint_alt"],
                condition=models.Q(status="accepted"),
                name="episode_fingerprint_alt_acc",
            ),
        ]

    def __str__(self) -> str:
        return f"Episode {self.id} ({self.status})"

    @property
    def accepted_seconds(self) -> Decimal:
        if self.status == self.Status.ACCEPTED and self.duration_seconds is not None:
            return self.duration_seconds
        return Decimal("0")


class ExclusionReason(models.TextChoices):
    """Why an accepted episode was excluded (words for pages in portal/wording.py)."""

    OPERATOR_HABITS = "operator_habits", "The operator's demonstrations are not usable"
    IDLE = "idle", "Too much idle time"
    JERKY = "jerky", "Jerky or unsafe motion"
    WRONG_TASK = "wrong_task", "Not the task asked for"
    FAILED_TASK = "failed_task", "The task was not achieved"
    CAMERA = "camera", "Camera view unusable"
    LOW_QUALITY = "low_quality", "Quality below what the order needs"
    MISLABELLED_OBJECT = "mislabelled_object", "An object is not the one labelled"
    OTHER = "other", "Other (see the note)"


class EpisodeExclusion(AppendOnlyModel):
    """An accepted episode taken out of its order: by staff or the customer, one episode or all
    of an operator's, in the pilot review or in the acceptance window after delivery. Append-
    only; one per episode (excluding it again changes nothing)."""

    class Scope(models.TextChoices):
        EPISODE = "episode", "Episodes excluded"
        OPERATOR = "operator", "An operator excluded"
        PILOT_REVIEW = "pilot_review", "Pilot rejected for re-collection"
        ACCEPTANCE = "acceptance", "Rejected after delivery"

    Remedy = Remedy

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    episode = models.OneToOneField(Episode, on_delete=models.PROTECT, related_name="exclusion")
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="exclusions")
    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="exclusions")
    operator = models.CharField(max_length=64)
    scope = models.CharField(max_length=20, choices=Scope.choices)
    remedy = models.CharField(max_length=10, choices=Remedy.choices, default=Remedy.RECOLLECT)
    reason_code = models.CharField(max_length=30, choices=ExclusionReason.choices)
    note = models.TextField(blank=True)
    # The episode's time that no longer counts (what its job and order lost).
    seconds = models.DecimalField(max_digits=12, decimal_places=3)
    actor_label = models.CharField(max_length=200)
    # Asked for by the customer (its exclusions during collection, its granted claims): counts
    # against its rejection allowance (datasets/services/claims.py).
    against_allowance = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["order", "created_at"])]

    def __str__(self) -> str:
        return f"{self.episode_id} excluded ({self.reason_code}) by {self.actor_label}"


class EpisodeVideo(models.Model):
    """One camera's video of an episode (issue 15): its own upload, like the episode's parquet
    (fresh `upload_key` per URL handed out, copied to `stored_key` before QA reads it). What QA
    measured (codec, size, frames) is kept for assembly and the delivery's features."""

    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="videos")
    camera_key = models.CharField(max_length=120)  # observation.images.<name>
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    upload_key = models.CharField(max_length=400)
    multipart_upload_id = models.CharField(max_length=400, blank=True)
    stored_key = models.CharField(max_length=400, blank=True)
    uploaded_at = models.DateTimeField(null=True, blank=True)
    codec = models.CharField(max_length=20, blank=True)  # h264, hevc, av1
    pix_fmt = models.CharField(max_length=20, blank=True)
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    frames = models.PositiveIntegerField(null=True, blank=True)
    fps = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["camera_key"]
        constraints = [
            models.UniqueConstraint(
                fields=["episode", "camera_key"], name="episode_video_one_per_camera"
            ),
            models.CheckConstraint(
                condition=models.Q(size_bytes__gt=0), name="episode_video_size_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.camera_key} of episode {self.episode_id}"


class Delivery(models.Model):
    """A LeRobot v3.0 dataset assembled in storage under `prefix`, for a pilot or the order.

    Versioned per order and kind (v1, v2, ...): a new version is assembled when episodes were
    excluded or rejected (and re-collected), or when the customer asks for a filtered one.
    Every version keeps its own prefix, files and manifest, and its links keep working until
    it is revoked; `superseded_at` marks a version a newer one replaces (or will replace)."""

    class Kind(models.TextChoices):
        PILOT = "pilot", "Pilot"
        FULL = "full", "Full dataset"

    class Status(models.TextChoices):
        ASSEMBLING = "assembling", "Assembling"
        READY = "ready", "Ready"
        FAILED = "failed", "Failed"

    class Review(models.TextChoices):
        NOT_NEEDED = "not_needed", "Not needed"
        PENDING = "pending", "Waiting for the customer"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="deliveries")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    version = models.PositiveIntegerField(default=1)
    previous = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    version_reason = models.CharField(max_length=500, blank=True)
    # What this version keeps of the accepted episodes: {"min_quality": float,
    # "exclude_operators": [pseudonym, ...]}; {} keeps every accepted episode.
    filters = models.JSONField(default=dict, blank=True)
    superseded_at = models.DateTimeField(null=True, blank=True)
    # The episodes this version holds, in episode_index order (set when it is ready): what the
    # customer may reject in the acceptance window.
    episode_ids = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.ASSEMBLING)
    prefix = models.CharField(max_length=300)
    episodes = models.PositiveIntegerField(default=0)
    frames = models.PositiveBigIntegerField(default=0)
    seconds = models.DecimalField(max_digits=14, decimal_places=3, default=Decimal("0"))
    failure_reason = models.TextField(blank=True)
    review = models.CharField(max_length=20, choices=Review.choices, default=Review.NOT_NEEDED)
    review_reason = models.TextField(blank=True)
    review_codes = models.JSONField(default=list, blank=True)  # ExclusionReason values
    reviewed_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    # Set once the ready email went out / the customer webhook was first tried: delivery_sweep
    # queues what a broker outage kept from ever running, and a repeat sends nothing twice.
    notified_at = models.DateTimeField(null=True, blank=True)
    webhook_attempted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # One live delivery per order, kind and version; a failed one may be followed by
            # another of the same version.
            models.UniqueConstraint(
                fields=["order", "kind", "version"],
                condition=~models.Q(status="failed"),
                name="delivery_one_live_per_version",
            ),
            models.CheckConstraint(
                condition=models.Q(version__gte=1), name="delivery_version_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} delivery v{self.version} {self.id} ({self.status})"

    @property
    def is_latest(self) -> bool:
        return self.superseded_at is None

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None


# The delivery state machine: the only moves datasets.services.deliveries.delivery_move
# allows. Revocation and the pilot review are separate fields, not states.
_D = Delivery.Status
DELIVERY_TRANSITIONS: dict[str, frozenset[str]] = {
    _D.ASSEMBLING: frozenset({_D.READY, _D.FAILED}),
    _D.READY: frozenset(),
    _D.FAILED: frozenset(),
}


class DeliveryFile(models.Model):
    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=300)  # relative to the delivery's prefix
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64, blank=True)  # blank only for manifest.json itself
    # The episodes whose frames the file holds (data and video files; [] for metadata, and for
    # files of versions assembled before this was recorded): no link once one is credited.
    episode_ids = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["path"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "path"], name="delivery_file_unique")
        ]

    def __str__(self) -> str:
        return self.path


class SignedLinkEvent(models.Model):
    """A signed link handed out: who asked, from where, until when (the audit of downloads
    and of camera clips)."""

    actor_label = models.CharField(max_length=200)
    user = models.ForeignKey(
        "marketplace.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    api_key = models.ForeignKey(
        "marketplace.ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    ip_address = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=300, blank=True)
    link_expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]

    @staticmethod
    def requester(caller, *, ip_address: str | None, user_agent: str) -> dict:
        """Who asked and from where, as the audit fields (the user agent printable only: no
        NUL reaches PostgreSQL; cut to the column)."""
        return {
            "actor_label": actor_label(caller),
            "user": caller.user,
            "api_key": caller.api_key,
            "ip_address": ip_address,
            "user_agent": "".join(c for c in user_agent or "" if c.isprintable())[:300],
        }


class DownloadEvent(SignedLinkEvent):
    """Every signed link to a delivery's file handed out. Append-only."""

    delivery = models.ForeignKey(Delivery, on_delete=models.PROTECT, related_name="downloads")
    path = models.CharField(max_length=300)

    class Meta(SignedLinkEvent.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.actor_label} {self.path} {self.created_at:%Y-%m-%d %H:%M}"


class BucketExport(models.Model):
    """A delivery copied into the customer's own S3 bucket, then read back and verified.

    The customer's secret key is kept only while the copy runs: it is erased when the export
    ends, verified or failed.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        COPYING = "copying", "Copying"
        VERIFIED = "verified", "Copied and verified"
        FAILED = "failed", "Failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    delivery = models.ForeignKey(Delivery, on_delete=models.PROTECT, related_name="exports")
    requested_by = models.CharField(max_length=200)
    bucket = models.CharField(max_length=63)
    prefix = models.CharField(max_length=300, blank=True)
    region = models.CharField(max_length=40, default="us-east-1")
    endpoint_url = models.CharField(max_length=300, blank=True)  # blank: AWS S3
    access_key_id = models.CharField(max_length=128)
    secret_access_key = models.CharField(max_length=256, blank=True)  # erased when done
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    files_total = models.PositiveIntegerField(default=0)
    files_done = models.PositiveIntegerField(default=0)
    bytes_done = models.BigIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Export of {self.delivery_id} to s3://{self.bucket}/{self.prefix} ({self.status})"

    @property
    def target(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/") + "/"


class EpisodeMediaEvent(AppendOnlyModel, SignedLinkEvent):
    """Every signed link to an episode's camera clip handed out (the episode page's preview).
    Append-only."""

    episode = models.ForeignKey(Episode, on_delete=models.PROTECT, related_name="media_events")
    camera_key = models.CharField(max_length=120)

    class Meta(SignedLinkEvent.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.actor_label} {self.camera_key} of {self.episode_id}"
