"""Near-duplicate fingerprints (issue 28): every accepted episode's trajectory signature
(datasets/qa_duplicates.py), kept after it is excluded or credited, so the same motion is
not accepted again anywhere on the platform. Imported by datasets/models.py; the lookup and
the lock are in datasets/services/duplicates.py."""

from django.db import models


class EpisodeTrajectory(models.Model):
    """An accepted episode's resampled state (float32 samples x dim), for the alignment check."""

    episode = models.OneToOneField(
        "datasets.Episode", primary_key=True, on_delete=models.CASCADE, related_name="trajectory"
    )
    version = models.PositiveSmallIntegerField()
    dim = models.PositiveSmallIntegerField()
    samples = models.BinaryField()

    def __str__(self) -> str:
        return f"Trajectory of episode {self.episode_id}"


class EpisodeFingerprint(models.Model):
    """One winnowed landmark key of an accepted episode: the index a lookup probes (key ->
    episode), with where in the episode it is (samples), for the alignment's offset."""

    id = models.BigAutoField(primary_key=True)
    key = models.BigIntegerField()
    episode = models.ForeignKey(
        "datasets.Episode", on_delete=models.CASCADE, related_name="fingerprint_keys"
    )
    at = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["key"], name="episode_fingerprint_key")]

    def __str__(self) -> str:
        return f"Key {self.key} of episode {self.episode_id}"


class EpisodeVideoSignature(models.Model):
    """An accepted episode's camera video as a signature's samples: each measured frame's 4x4
    luma digest (datasets/qa_video_checks.py) resampled as a 16-element state (float32)."""

    id = models.BigAutoField(primary_key=True)
    episode = models.ForeignKey(
        "datasets.Episode", on_delete=models.CASCADE, related_name="video_signatures"
    )
    camera_key = models.CharField(max_length=120)
    version = models.PositiveSmallIntegerField()
    dim = models.PositiveSmallIntegerField()
    samples = models.BinaryField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["episode", "camera_key"], name="episode_video_signature_camera"
            )
        ]

    def __str__(self) -> str:
        return f"Video signature of episode {self.episode_id}, camera {self.camera_key}"


class EpisodeVideoFingerprint(models.Model):
    """One winnowed key of an accepted camera video (its own table: video keys never meet
    trajectory keys), with where in the video it is (samples)."""

    id = models.BigAutoField(primary_key=True)
    key = models.BigIntegerField()
    video = models.ForeignKey(EpisodeVideoSignature, on_delete=models.CASCADE, related_name="keys")
    at = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["key"], name="episode_video_fingerprint_key")]

    def __str__(self) -> str:
        return f"Key {self.key} of video signature {self.video_id}"
