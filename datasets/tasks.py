"""Celery tasks for episodes and deliveries (queues "qa" and "delivery", see
marketplace/celery.py). They take ids and call one service; services queue them by name
(marketplace/queueing.py) and never import this module. QA records a decision only once, so a
rerun is harmless."""

from celery import shared_task
from celery.utils.time import get_exponential_backoff_interval
from django.conf import settings

from datasets import storage
from datasets.services import claims, deliveries, exports, qa, sweep
from marketplace.task_options import task_options

OPTIONS = task_options(transient=(storage.StorageError,))
QA_TIME_LIMIT = qa.QA_TIME_LIMIT
ClaimRecheckLater = claims.ClaimRecheckLater


@shared_task(
    bind=True,
    **{**OPTIONS, "autoretry_for": ()},
    soft_time_limit=QA_TIME_LIMIT,
    time_limit=QA_TIME_LIMIT + 30,
)
def qa_episode(self, episode_id: str, after_transient_error: bool = False) -> str:
    """A retry after a transient error says so, so that QA does not count the run that failed
    as one that died unfinished (a redelivery after a worker's death does not say so)."""
    try:
        return qa.episode_run_qa(
            episode_id=episode_id, previous_run_ended=after_transient_error
        ).status
    except qa.TRANSIENT_ERRORS as exc:
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
    return sweep.qa_sweep()


@shared_task(**OPTIONS)
def delivery_assemble(delivery_id: str) -> str:
    """Queue "delivery": write the dataset, card and manifest; the order moves on when done."""
    return deliveries.delivery_assemble(delivery_id=delivery_id).status


@shared_task(**OPTIONS)
def delivery_sweep() -> int:
    """celery beat: queue what a lost message left undone (datasets.services.sweep)."""
    return sweep.delivery_sweep()


@shared_task(**OPTIONS)
def delivery_notify(delivery_id: str) -> int:
    return deliveries.delivery_notify(delivery_id=delivery_id)


@shared_task(**OPTIONS)
def delivery_export(export_id: str) -> str:
    """Queue "delivery": copy a delivery into the customer's bucket and verify it there."""
    return exports.bucket_export_run(export_id=export_id).status


@shared_task(**task_options(transient=(storage.StorageError, ClaimRecheckLater)))
def qa_claim_recheck(claim_id: str) -> str:
    """Queue "qa": re-check a claim's episodes (reads their files) and decide each."""
    return claims.claim_recheck(claim_id=claim_id).status


@shared_task(**OPTIONS)
def claims_sweep() -> int:
    """celery beat: claims left unchecked, disputes past the fleet's deadline."""
    return sweep.claims_sweep()
