"""The error codes datasets answers (see marketplace/error_codes.py)."""

from django.db import models

from marketplace.error_codes import register


@register
class ErrorCode(models.TextChoices):
    ACCEPTANCE_WINDOW_CLOSED = (
        "acceptance_window_closed",
        "The delivery's acceptance window is over: its episodes can no longer be rejected.",
    )
    ALREADY_REVIEWED = "already_reviewed", "The pilot was already reviewed."
    CLAIM_IN_PROGRESS = (
        "claim_in_progress",
        "Another claim of this order is still being re-checked: file this one in a moment.",
    )
    CLAIM_ROLE_REFUSED = (
        "claim_role_refused",
        "This role may not file this claim: credit needs the owner or billing role, "
        "re-collection the owner or member role.",
    )
    DISPUTE_AWAITING_FLEET = (
        "dispute_awaiting_fleet",
        "The fleet may still answer this dispute: it is decided after its answer or deadline.",
    )
    DISPUTE_CLOSED = (
        "dispute_closed",
        "The dispute no longer takes this (answered, past its deadline, or decided).",
    )
    EPISODE_ALREADY_CLAIMED = (
        "episode_already_claimed",
        "The episode was claimed before (in this or an earlier version): once only.",
    )
    EPISODE_DELIVERED = (
        "episode_delivered",
        "The episode was delivered: reject it with a claim, not an exclusion.",
    )
    EPISODES_CREDITED = (
        "episodes_credited",
        "The file holds episodes the customer was credited for: no new links to it.",
    )
    RECOLLECTION_EXHAUSTED = (
        "recollection_exhausted",
        "These hours were re-collected once already: credit them, or ask staff.",
    )
    REJECTION_ALLOWANCE_EXCEEDED = (
        "rejection_allowance_exceeded",
        "Beyond the order's rejection allowance: claim delivered episodes for a staff decision.",
    )
    ARCHIVE_TOO_LARGE = (
        "archive_too_large",
        "The delivery is too large for a single archive: use the download command.",
    )
    EPISODE_NOT_ACCEPTED = (
        "episode_not_accepted",
        "Only accepted episodes can be excluded or rejected.",
    )
    EXCLUSION_NOT_ALLOWED = (
        "exclusion_not_allowed",
        "The order's state does not allow excluding episodes now (see the message).",
    )
    EXPORT_REFUSED = "export_refused", "The bucket export cannot start (see the fields)."
    DELIVERY_NOT_READY = "delivery_not_ready", "The delivery is not ready yet."
    DELIVERY_REVOKED = "delivery_revoked", "The delivery was revoked: no new links are issued."
    DELIVERY_SUPERSEDED = (
        "delivery_superseded",
        "A newer version of this delivery replaces it.",
    )
    DUPLICATE_PATH = "duplicate_path", "The same file is asked for twice in one request."
    DUPLICATE_EPISODE = (
        "duplicate_episode",
        "The same file was already uploaded or accepted in this order.",
    )
    JOB_FULLY_BOOKED = (
        "job_fully_booked",
        "The job's remaining time is covered by episodes already on the way.",
    )
    EPISODE_FILES_MISSING = (
        "episode_files_missing",
        "Not every file of the episode (parquet, camera videos) is uploaded yet.",
    )
    EPISODE_NOT_AWAITING_UPLOAD = (
        "episode_not_awaiting_upload",
        "The episode's file can no longer change.",
    )
    INVALID_DELIVERY_TRANSITION = (
        "invalid_delivery_transition",
        "The delivery's status does not allow this move.",
    )
    JOB_NOT_ACTIVE = (
        "job_not_active",
        "The job is not assigned or in progress: it takes no episodes.",
    )
    NOT_A_PILOT = "not_a_pilot", "Only a pilot delivery is reviewed."
    STORAGE_UNAVAILABLE = (
        "storage_unavailable",
        "Object storage cannot be reached; nothing changed, retry.",
    )
