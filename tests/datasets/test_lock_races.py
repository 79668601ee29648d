"""The locks episode registration and QA rely on, raced for real: two threads, each on its own
PostgreSQL connection, meet at a barrier inside the services (the moment a comment in
`datasets/services/episodes.py` or `datasets/services/qa.py` says a lock covers), and the
test goes on only once the other thread has passed the same point or waits on a row lock
(`pg_stat_activity`), so the race is the same on every run. Nothing is retried: an error
either service raises is the test's failure."""

import hashlib
import threading
import time
from decimal import Decimal

import pytest
from django.db import connection

from datasets.models import Episode
from datasets.qa_format import QAResult
from datasets.services import episodes
from datasets.services.episodes import EpisodeRegistration, episode_register
from datasets.services.qa import episode_record_qa
from fleets.models import Job
from marketplace.errors import Conflict
from tests.datasets.helpers import Collection

pytestmark = pytest.mark.django_db(transaction=True)

WAIT_SECONDS = 20


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def waits_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {WAIT_SECONDS} s")
        time.sleep(0.01)


def run_together(*targets) -> list[BaseException]:
    """Each target in its own thread (its own connection); what they raised, in the test's
    thread. Every thread must end."""
    errors: list[BaseException] = []

    def run(target):
        try:
            target()
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=WAIT_SECONDS * 2)
    assert not [thread for thread in threads if thread.is_alive()], "a thread never finished"
    return errors


def registration(collection: Collection, seconds: int, name: str) -> EpisodeRegistration:
    data = name.encode()
    return EpisodeRegistration(
        site_id=collection.site.id,
        robot_id=collection.robot.id,
        operator="op-7",
        task_instruction="insert the peg",
        success=True,
        fps=30,
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        frames=seconds * 30,
    )


def test_two_registrations_at_once_count_each_others_time(fleet_operator, customer, monkeypatch):
    """episodes.py: registering locks the job, so two registrations at once count each other's
    time. The job has room for one 36 s episode: one registers, the other is refused."""
    # given: a job of 36 s (0.01 h) in progress, nothing registered
    collection = Collection(fleet_operator, customer, target_hours="0.01", status="in_progress")
    organization = fleet_operator.organization
    start = threading.Barrier(2)
    checked: dict[int, threading.Event] = {}
    pids: dict[str, int] = {}
    check_room = episodes._check_room

    def check_then_wait_for_the_other(*, job, registration):
        check_room(job=job, registration=registration)  # a refusal raises here
        me = threading.get_ident()
        checked[me].set()
        # go on once the other has checked too, or waits for the job's lock
        other_name = next(n for n in pids if n != threading.current_thread().name)
        other = next(event for ident, event in checked.items() if ident != me)
        until(
            lambda: other.is_set() or waits_on_a_lock(pids[other_name]),
            "the other registration checking or waiting",
        )

    outcomes: list[str] = []

    def register(name: str):
        def target():
            threading.current_thread().name = name
            checked[threading.get_ident()] = threading.Event()
            pids[name] = backend_pid()
            start.wait(timeout=WAIT_SECONDS)
            try:
                episode_register(
                    organization=organization,
                    job_id=collection.job.id,
                    registration=registration(collection, 36, name),
                )
                outcomes.append("registered")
            except Conflict as exc:
                outcomes.append(exc.code)

        return target

    monkeypatch.setattr(episodes, "_check_room", check_then_wait_for_the_other)

    # when: both register at once
    errors = run_together(register("first"), register("second"))

    # then: one got the room, the other was told it is taken
    assert errors == []
    assert sorted(outcomes) == ["job_fully_booked", "registered"]
    assert Episode.objects.filter(job=collection.job).count() == 1


def test_registration_and_qa_at_once_neither_blocks_the_other_for_ever(
    fleet_operator, customer, monkeypatch
):
    """qa.py: QA locks the order and job FOR NO KEY UPDATE, so a registration holding the job
    (and inserting an episode, whose foreign keys take KEY SHARE locks on the order and job)
    is not blocked by it; with FOR UPDATE the two deadlocked. Here registration holds the job
    while QA holds the order and waits for the job; both must finish, without a retry."""
    # given: a job of 36 s in progress with one 10 s episode uploaded and awaiting QA
    collection = Collection(fleet_operator, customer, target_hours="0.01", status="in_progress")
    uploaded = Episode.objects.create(
        job=collection.job,
        order=collection.order,
        fleet=collection.job.fleet,
        site=collection.site,
        robot=collection.robot,
        operator="op-7",
        task_instruction="insert the peg",
        success=True,
        fps=30,
        size_bytes=10,
        sha256=hashlib.sha256(b"uploaded").hexdigest(),
        upload_key="k",
        declared_frames=300,
        status=Episode.Status.UPLOADED,
    )
    job_held = threading.Barrier(2)
    qa_pid: list[int] = []
    check_room = episodes._check_room

    def hold_the_job_until_qa_waits(*, job, registration):
        check_room(job=job, registration=registration)
        job_held.wait(timeout=WAIT_SECONDS)  # registration holds the job's lock
        until(lambda: qa_pid and waits_on_a_lock(qa_pid[0]), "QA waiting for the job's lock")
        # now insert the episode (KEY SHARE on the order QA holds) and commit

    def register():
        episode_register(
            organization=fleet_operator.organization,
            job_id=collection.job.id,
            registration=registration(collection, 20, "new"),
        )

    def record_qa():
        qa_pid.append(backend_pid())
        job_held.wait(timeout=WAIT_SECONDS)
        episode_record_qa(
            episode_id=uploaded.id,
            result=QAResult(frames=300, duration_seconds=Decimal("10")),
            stored_key="stored/k",
        )

    monkeypatch.setattr(episodes, "_check_room", hold_the_job_until_qa_waits)

    # when
    errors = run_together(register, record_qa)

    # then: both finished, each with its effect
    assert errors == []
    uploaded.refresh_from_db()
    assert uploaded.status == Episode.Status.ACCEPTED
    assert Job.objects.get(pk=collection.job.id).accepted_seconds == Decimal("10")
    assert Episode.objects.filter(job=collection.job, status=Episode.Status.REGISTERED).count() == 1
