"""Celery tasks for episodes and deliveries (queues "qa" and "delivery", see
marketplace/celery.py). They take ids and call one service (imported inside the task: services
import this module to enqueue); QA records a decision only once, so a rerun is harmless."""

from celery import shared_task
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings

from datasets import storage
from marketplace.task_options import task_options

OPTIONS = task_options(transient=(storage.StorageError,))


# QA checks stop themselves at EPISODE_QA_TIME_LIMIT_SECONDS (in a sandbox that is killed a
# little later); Celery's limits are the last backstop.
QA_TIME_LIMIT = settings.EPISODE_QA_TIME_LIMIT_SECONDS + 120


@shared_task(
    bind=True,
    **{**OPTIONS, "autoretry_for": ()},
    soft_time_limit=QA_TIME_LIMIT,
    time_limit=QA_TIME_LIMIT + 30,
)
def qa_episode(self, episode_id: str, after_transient_error: bool = False) -> str:
    """A retry after a transient error says so, so that QA does not count the run that failed
    as one that died unfinished (a redelivery after a worker's death does not say so)."""
    from datasets.services.qa import TRANSIENT_ERRORS, episode_run_qa

    try:
        return episode_run_qa(
            episode_id=episode_id, previous_run_ended=after_transient_error
        ).status
    except TRANSIENT_ERRORS as exc:
        countdown = get_exponential_backoff_interval(
            factor=2,
            retries=self.request.retries,
            maximum=settings.TASK_RETRY_BACKOFF_MAX_SECONDS,
            full_jitter=True,
        )
        raise self.retry(
            exc=exc, countdown=countdown, kwargs={"after_transient_error": True}
        ) from exc


@shared_task(**OPTIONS)
def qa_sweep() -> int:
    """celery beat: re-queue QA of episodes uploaded long ago and still undecided."""
    from datasets.services.sweep import qa_sweep

    return qa_sweep()


@shared_task(**OPTIONS)
def delivery_assemble(delivery_id: str) -> str:
    """Queue "delivery": write the dataset, card and manifest; the order moves on when done."""
    from datasets.services.deliveries import delivery_assemble

    return delivery_assemble(delivery_id=delivery_id).status


@shared_task(**OPTIONS)
def delivery_sweep() -> int:
    """celery beat: queue what a lost message left undone (datasets.services.sweep)."""
    from datasets.services.sweep import delivery_sweep

    return delivery_sweep()


@shared_task(**OPTIONS)
def delivery_notify(delivery_id: str) -> int:
    from datasets.services.deliveries import delivery_notify

    return delivery_notify(delivery_id=delivery_id)


@shared_task(**OPTIONS)
def delivery_export(export_id: str) -> str:
    """Queue "delivery": copy a delivery into the customer's bucket and verify it there."""
    from datasets.services.exports import bucket_export_run

    return bucket_export_run(export_id=export_id).status


class ClaimRecheckLater(Exception):
    """A delivery of the claim's order is being assembled: the re-check waits for it."""


@shared_task(**task_options(transient=(storage.StorageError, ClaimRecheckLater)))
def qa_claim_recheck(claim_id: str) -> str:
    """Queue "qa": re-check a claim's episodes (reads their files) and decide each."""
    from datasets.services.claims import claim_recheck

    return claim_recheck(claim_id=claim_id).status


@shared_task(**OPTIONS)
def claims_sweep() -> int:
    """celery beat: claims left unchecked, disputes past the fleet's deadline."""
    from datasets.services.sweep import claims_sweep

    return claims_sweep()
