"""Near-duplicates across the platform (issue 28): an episode whose trajectory repeats an
accepted one's (shifted, cut, split, resampled, with small noise: datasets/qa_duplicates.py) is
refused, in its order or any other, the accepted one excluded or credited since or not.

Lock, then check: the decision takes a transaction-scoped lock per state dimension
(pg_advisory_xact_lock; trajectories of different dimensions never match) before looking up,
and stores the accepted episode's keys in the same transaction, so of two copies decided at
the same time the second waits for the first's commit and then finds its keys. On SQLite (the
embedded demo) every transaction is IMMEDIATE (marketplace/settings.py): one writer at a time.
"""

import numpy as np
from django.conf import settings
from django.db import connection

from datasets.models import (
    Episode,
    EpisodeFingerprint,
    EpisodeTrajectory,
    EpisodeVideoFingerprint,
    EpisodeVideoSignature,
)
from datasets.qa_duplicates import (
    VERSION,
    VIDEO_SPREAD,
    Signature,
    candidate_offsets,
    repeats,
)

LOCK_CLASS = 28_005  # pg_advisory_xact_lock(class, dim): this lock's namespace
VIDEO_LOCK_CLASS = 28_006  # the camera videos' (one lock: every video's digest has one shape)
LOOKUP_CHUNK = 900  # keys per IN list (SQLite's variable limit on old builds is 999)
MAX_HITS = 20_000  # rows a lookup reads at most (a key shared by very many episodes)
MAX_CANDIDATES = 5  # candidates aligned, most shared keys first


def lock_signatures(dim: int, lock_class: int = LOCK_CLASS) -> None:
    """Serialize duplicate decisions of one state dimension until the transaction ends."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [lock_class, dim])


def near_duplicate(episode: Episode, signature: Signature) -> Episode | None:
    """The accepted (or since excluded) episode this one repeats, if any: candidates by an
    indexed lookup of the keys, confirmed by aligning the trajectories."""
    keys = sorted(set(signature.lookup.tolist()))
    hits = []
    for start in range(0, len(keys), LOOKUP_CHUNK):
        found = EpisodeFingerprint.objects.filter(key__in=keys[start : start + LOOKUP_CHUNK])
        found = found.exclude(episode_id=episode.id)
        if not settings.EPISODE_QA_PLATFORM_DUPLICATES:
            found = found.filter(episode__order_id=episode.order_id)
        hits += found.values_list("episode_id", "key", "at")[: MAX_HITS - len(hits)]
    for candidate, offset, _ in candidate_offsets(signature, hits)[:MAX_CANDIDATES]:
        stored = EpisodeTrajectory.objects.filter(
            episode_id=candidate, version=VERSION, dim=signature.dim
        ).first()
        if stored is None:
            continue
        old = np.frombuffer(bytes(stored.samples), dtype=np.float32).reshape(-1, stored.dim)
        if repeats(signature.samples, old, offset):
            return Episode.objects.only("id", "order_id").get(pk=candidate)
    return None


def record_signature(episode: Episode, signature: Signature) -> None:
    """Store an accepted episode's signature (once: a second call changes nothing)."""
    if EpisodeTrajectory.objects.filter(episode_id=episode.id).exists():
        return
    EpisodeTrajectory.objects.create(
        episode_id=episode.id,
        version=VERSION,
        dim=signature.dim,
        samples=np.ascontiguousarray(signature.samples, dtype=np.float32).tobytes(),
    )
    EpisodeFingerprint.objects.bulk_create(
        EpisodeFingerprint(episode_id=episode.id, key=key, at=at)
        for key, at in zip(signature.keys.tolist(), signature.key_times.tolist(), strict=True)
    )


def video_near_duplicate(episode: Episode, signatures: dict[str, Signature]) -> Episode | None:
    """The accepted (or since excluded) episode one of whose camera videos (any camera) one of
    this episode's repeats, if any: the same lookup and alignment as the trajectory's, on the
    videos' own keys and samples (distances in units of at least VIDEO_SPREAD of luma, each
    block's brightness offset left out: a re-encoded or resized copy is found). The caller
    holds lock_signatures(dim, VIDEO_LOCK_CLASS)."""
    for _, signature in sorted(signatures.items()):
        keys = sorted(set(signature.lookup.tolist()))
        hits = []
        for start in range(0, len(keys), LOOKUP_CHUNK):
            found = EpisodeVideoFingerprint.objects.filter(
                key__in=keys[start : start + LOOKUP_CHUNK]
            ).exclude(video__episode_id=episode.id)
            if not settings.EPISODE_QA_PLATFORM_DUPLICATES:
                found = found.filter(video__episode__order_id=episode.order_id)
            hits += found.values_list("video_id", "key", "at")[: MAX_HITS - len(hits)]
        for candidate, offset, _ in candidate_offsets(signature, hits)[:MAX_CANDIDATES]:
            stored = EpisodeVideoSignature.objects.get(pk=candidate)
            if stored.version != VERSION or stored.dim != signature.dim:
                continue
            old = np.frombuffer(bytes(stored.samples), dtype=np.float32).reshape(-1, stored.dim)
            if repeats(signature.samples, old, offset, spread=VIDEO_SPREAD, centred=True):
                return Episode.objects.only("id", "order_id").get(pk=stored.episode_id)
    return None


def record_video_signatures(episode: Episode, signatures: dict[str, Signature]) -> None:
    """Store an accepted episode's camera videos' signatures (once per camera)."""
    for camera_key, signature in sorted(signatures.items()):
        video, created = EpisodeVideoSignature.objects.get_or_create(
            episode_id=episode.id,
            camera_key=camera_key,
            defaults={
                "version": VERSION,
                "dim": signature.dim,
                "samples": np.ascontiguousarray(signature.samples, dtype=np.float32).tobytes(),
            },
        )
        if created:
            EpisodeVideoFingerprint.objects.bulk_create(
                EpisodeVideoFingerprint(video=video, key=key, at=at)
                for key, at in zip(
                    signature.keys.tolist(), signature.key_times.tolist(), strict=True
                )
            )
