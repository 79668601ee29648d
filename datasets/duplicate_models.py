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
