"""Celery tasks for episodes and deliveries (queues "qa" and "delivery", see
marketplace/celery.py). They take ids and call one service (imported inside the task: services
import this module to enqueue); QA records a decision only once, so a rerun is harmless."""

from celery import shared_task

from datasets import storage
from marketplace.task_options import task_options

OPTIONS = task_options(transient=(storage.StorageError,))


@shared_task(**OPTIONS)
def qa_episode(episode_id: str) -> str:
    from datasets.services.qa import episode_run_qa

    return episode_run_qa(episode_id=episode_id).status


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
