"""Index the trajectories of episodes accepted before near-duplicate signatures existed
(issue 28, migration 0013): each accepted or excluded episode without one is read again from
its stored copy, in the QA sandbox, and its signature stored. Safe to run again (and while QA
runs: the same lock as QA's decisions); `--limit` bounds one run."""

from django.core.management.base import BaseCommand
from django.db import transaction

from datasets.models import Episode
from datasets.qa_sandbox import check_stored_episode_bounded
from datasets.services.duplicates import lock_signatures, record_signature
from datasets.services.qa import episode_expectation


class Command(BaseCommand):
    help = "Store the near-duplicate signature of every accepted or excluded episode lacking one."

    def add_arguments(self, parser):
        parser.add_argument("--limit", type=int, default=0, help="at most this many (0: all)")

    def handle(self, *args, limit: int = 0, **options):
        pending = (
            Episode.objects.filter(
                status__in=[Episode.Status.ACCEPTED, Episode.Status.EXCLUDED],
                trajectory__isnull=True,
            )
            .exclude(stored_key="")
            .select_related("job__embodiment", "order")
            .order_by("decided_at", "id")
        )
        stored = unreadable = 0
        for episode in pending[:limit] if limit else pending.iterator(chunk_size=100):
            result = check_stored_episode_bounded(episode.stored_key, episode_expectation(episode))
            if result.signature is None:
                unreadable += 1
                self.stderr.write(f"episode {episode.id}: no signature ({_codes(result)})")
                continue
            with transaction.atomic():
                lock_signatures(result.signature.dim)
                record_signature(episode, result.signature)
            stored += 1
        self.stdout.write(f"{stored} episodes indexed, {unreadable} unreadable")


def _codes(result) -> str:
    return ", ".join(failure.code for failure in result.failures) or "content QA is off"
