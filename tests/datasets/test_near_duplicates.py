"""Near-duplicates (issue 28 item 5): an accepted trajectory sent again shifted by a few
frames, cropped, cut in halves, resampled or with small noise is refused `near_duplicate`, in
its order and in any other (its episode excluded or credited since or not), naming the match
to staff only; distinct demonstrations pass; two copies decided at the same time: one passes.
The signatures alone first (datasets/qa_duplicates.py), then through the real QA task on the
local S3 server (files written by pyarrow, QA in its sandbox) on PostgreSQL."""

import io
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import reverse

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode, EpisodeFingerprint, EpisodeTrajectory
from datasets.qa_checks import Reason, check_episode_file
from datasets.qa_duplicates import candidate_offsets, repeats, trajectory_signature
from datasets.services import qa as qa_service
from datasets.services.exclusions import episodes_exclude
from datasets.services.qa import episode_expectation, episode_record_qa
from fleet_agent.episodes import make_episode
from tests.datasets.helpers import Collection, put, upload_episode

FPS = 30


def cut(columns: dict, start=0, stop=None, step=1, fps=FPS, noise=0.0, seed=0, drop=0) -> dict:
    """Rows start:stop:step of an episode as a file of their own (frame_index and timestamp
    from 0 at `fps`), less every `drop`-th row, with Gaussian noise of `noise` units on the
    state and action."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in ("observation.state", "action"):
        values = columns[name][start:stop:step]
        if drop:
            values = np.delete(values, np.arange(drop // 2, len(values), drop), axis=0)
        out[name] = (values + rng.normal(0, noise, values.shape)).astype(np.float32)
    frames = len(out["action"])
    out["timestamp"] = (np.arange(frames) / fps).astype(np.float32)
    out["frame_index"] = np.arange(frames, dtype=np.int64)
    return out


VARIANTS = {
    "shift 1": {"start": 1},
    "shift 2": {"start": 2},
    "shift 10": {"start": 10},
    "crop": {"start": 150, "stop": 500},
    "first half": {"stop": 450},
    "second half": {"start": 450},
    "2% of the frames dropped": {"drop": 50},
    "noise": {"noise": 0.004, "seed": 7},
}
# An order's episodes share one frame rate: a resampled copy goes to another order.
RESAMPLED = {"every other frame at 15 fps": {"step": 2, "fps": 15}}


def signature_of(columns: dict, fps=FPS):
    return trajectory_signature(columns["observation.state"], fps)


def found(copy, original) -> bool:
    """The lookup and confirmation datasets/services/duplicates.py runs, on one stored episode."""
    lookup = set(copy.lookup.tolist())
    hits = [
        ("original", key, at)
        for key, at in zip(original.keys.tolist(), original.key_times.tolist(), strict=True)
        if key in lookup
    ]
    return any(
        repeats(copy.samples, original.samples, offset)
        for _, offset, _ in candidate_offsets(copy, hits)
    )


# --- the signatures ------------------------------------------------------------------------


@pytest.mark.parametrize("variant", [*VARIANTS, *RESAMPLED])
def test_each_kind_of_copy_is_found_by_its_keys_and_confirmed_by_alignment(variant):
    how = {**VARIANTS, **RESAMPLED}[variant]
    for seed in range(12):
        columns = episode_table(frames=900, seed=seed)
        copy = cut(columns, **how)
        fps = how.get("fps", FPS)
        assert found(signature_of(copy, fps), signature_of(columns)), (variant, seed)


FR3 = (
    (-2.7437, 2.7437),
    (-1.7837, 1.7837),
    (-2.9007, 2.9007),
    (-3.0421, -0.1518),
    (-2.8065, 2.8065),
    (0.5445, 4.5169),
    (-3.0159, 3.0159),
    (0.0, 0.08),
)


def agent_state(seed: int) -> np.ndarray:
    """The reference fleet agent's motion: minimum-jerk moves between random waypoints, every
    joint stopping at each (flat turns, all at once)."""
    episode = make_episode(action_dim=8, seconds=30, seed=seed, state_limits=FR3)
    table = pq.read_table(io.BytesIO(episode.data), columns=["observation.state"])
    return np.array(table.column(0).to_pylist(), dtype=np.float32)


def test_waypoint_motions_shifted_or_noisy_are_found_halves_mostly_distinct_ones_never():
    originals = [agent_state(seed) for seed in range(10)]
    signatures = [trajectory_signature(state, FPS, FR3) for state in originals]
    rng = np.random.default_rng(5)
    halves = 0
    for state, original in zip(originals, signatures, strict=True):
        noisy = state + rng.normal(0, 1, state.shape) * 0.02 * state.std(axis=0)
        for copy in (state[10:], noisy):
            assert found(trajectory_signature(copy.astype(np.float32), FPS, FR3), original)
        for half in (state[: len(state) // 2], state[len(state) // 2 :]):
            halves += found(trajectory_signature(half, FPS, FR3), original)
    # 15 s of these has 3-4 stops: a half is found unless too few landmarks fall in it
    assert halves >= 18, halves
    for number, one in enumerate(signatures):
        assert not any(found(one, other) for other in signatures[number + 1 :])


def test_a_long_episode_looks_up_its_winnowed_keys_and_is_still_found(monkeypatch):
    columns = episode_table(frames=900, seed=8)
    whole = signature_of(columns)
    assert len(whole.lookup) > 100
    monkeypatch.setattr("datasets.qa_duplicates.MAX_LOOKUP_KEYS", 100)  # as a long episode
    shifted = signature_of(cut(columns, start=3))
    assert len(shifted.lookup) < len(whole.lookup)
    assert found(shifted, whole)


def test_distinct_and_re_performed_demonstrations_are_not_duplicates():
    signatures = [signature_of(episode_table(frames=900, seed=seed)) for seed in range(40)]
    for number, one in enumerate(signatures):
        for other in signatures[number + 1 :]:
            assert not found(one, other)
            assert not repeats(one.samples, other.samples, 0)
    # the same sway again with its phases 0.3 rad later (every joint): another demonstration
    columns = episode_table(frames=900, seed=3)
    again = episode_table(frames=900, seed=3)
    t = np.arange(900) / FPS
    again["observation.state"] = columns["observation.state"] + 0.3 * 0.45 * np.cos(t)[:, None]
    assert not found(signature_of(again), signature_of(columns))


# --- through QA, on PostgreSQL ---------------------------------------------------------------


@pytest.fixture
def sandboxed(settings):
    settings.EPISODE_QA_SANDBOX = True  # as in production: the checks run in the forked child


def rejected_as_copy(episode: Episode, original: Episode) -> bool:
    codes = [failure["code"] for failure in episode.qa_failures]
    return (
        episode.status == Episode.Status.REJECTED
        and codes == [Reason.NEAR_DUPLICATE]
        and episode.near_duplicate_of_id == original.id
        and str(original.id) not in str(episode.qa_failures)
    )


@pytest.mark.django_db
@pytest.mark.usefixtures("s3", "eager_celery", "sandboxed")
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_copy_in_the_order_is_refused_and_not_counted(
    variant, fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    columns = episode_table(frames=900, seed=11)
    original = upload_episode(collection, parquet_bytes(columns), capture)
    assert original.status == Episode.Status.ACCEPTED, original.qa_failures
    assert EpisodeFingerprint.objects.filter(episode=original).exists()
    copy = upload_episode(collection, parquet_bytes(cut(columns, **VARIANTS[variant])), capture)
    assert rejected_as_copy(copy, original), (copy.status, copy.qa_failures)
    assert not EpisodeFingerprint.objects.filter(episode=copy).exists()  # only accepted ones
    collection.job.refresh_from_db()
    assert collection.job.accepted_seconds == original.duration_seconds
    # a distinct demonstration in the same order still counts
    fresh = upload_episode(collection, parquet_bytes(episode_table(frames=900, seed=12)), capture)
    assert fresh.status == Episode.Status.ACCEPTED, fresh.qa_failures


@pytest.mark.django_db
@pytest.mark.usefixtures("s3", "eager_celery", "sandboxed")
@pytest.mark.parametrize("remedy", ["recollect", "credit"])
def test_the_files_of_an_excluded_or_credited_episode_are_refused_in_another_customers_order(
    remedy,
    fleet_operator,
    customer,
    other_customer,
    make_tenant,
    django_capture_on_commit_callbacks,
):
    capture = django_capture_on_commit_callbacks
    first = Collection(fleet_operator, customer, target_hours="0.1")
    data = parquet_bytes(episode_table(frames=600, seed=21))
    original = upload_episode(first, data, capture)
    assert original.status == Episode.Status.ACCEPTED, original.qa_failures
    with capture(execute=True):
        episodes_exclude(
            order_id=first.order.id,
            staff_label="staff:ops",
            episode_ids=[original.id],
            reason_code="idle",
            remedy=remedy,
        )
    original.refresh_from_db()
    assert original.status == Episode.Status.EXCLUDED
    # the same bytes, by another fleet, in another customer's order
    other_fleet = make_tenant("fleet_operator")
    elsewhere = Collection(other_fleet, other_customer, target_hours="0.1")
    again = upload_episode(elsewhere, data, capture)
    assert rejected_as_copy(again, original), (again.status, again.qa_failures)
    # its second half, shifted by a frame
    half = cut(episode_table(frames=600, seed=21), start=301)
    assert rejected_as_copy(upload_episode(elsewhere, parquet_bytes(half), capture), original)
    # every other frame, at 15 fps (a third order)
    slower = Collection(other_fleet, other_customer, target_hours="0.1")
    resampled = cut(episode_table(frames=600, seed=21), **RESAMPLED["every other frame at 15 fps"])
    copy = upload_episode(slower, parquet_bytes(resampled), capture, fps=15)
    assert rejected_as_copy(copy, original), (copy.status, copy.qa_failures)
    fresh = upload_episode(elsewhere, parquet_bytes(episode_table(frames=600, seed=22)), capture)
    assert fresh.status == Episode.Status.ACCEPTED, fresh.qa_failures


@pytest.mark.django_db
@pytest.mark.usefixtures("s3", "eager_celery", "sandboxed")
def test_neither_the_customer_nor_the_fleet_is_shown_the_matching_episode(
    fleet_operator, customer, other_customer, make_tenant, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    first = Collection(fleet_operator, customer, target_hours="0.1")
    columns = episode_table(frames=600, seed=31)
    original = upload_episode(first, parquet_bytes(columns), capture)
    other_fleet = make_tenant("fleet_operator")
    elsewhere = Collection(other_fleet, other_customer, target_hours="0.1")
    copy = upload_episode(elsewhere, parquet_bytes(cut(columns, start=2)), capture)
    assert rejected_as_copy(copy, original)
    secrets = (str(original.id), str(first.order.id), str(first.job.id), str(first.site.id))
    api = other_customer.client.get(
        f"/api/v1/orders/{elsewhere.order.id}/episodes?reason=near_duplicate"
    )
    assert [row["id"] for row in api.json()["results"]] == [str(copy.id)]
    fleet_api = other_fleet.client.get(f"/api/v1/fleet/episodes/{copy.id}")
    assert fleet_api.json()["qa_failures"][0]["code"] == Reason.NEAR_DUPLICATE
    pages = []
    for tenant, url in (
        (other_customer, reverse("order-episodes-page", args=[elsewhere.order.id])),
        (other_fleet, reverse("job-detail-page", args=[elsewhere.job.id])),
    ):
        client = tenant.session_client()
        pages.append(client.get(url))
    for response in (api, fleet_api, *pages):
        assert response.status_code == 200
        body = response.content.decode()
        assert "near_duplicate" in body or "already accepted" in body
        assert not any(secret in body for secret in secrets)


@pytest.mark.django_db
@pytest.mark.usefixtures("s3", "eager_celery", "sandboxed")
def test_the_backfill_indexes_episodes_accepted_before_signatures(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    columns = episode_table(frames=600, seed=41)
    original = upload_episode(collection, parquet_bytes(columns), capture)
    EpisodeTrajectory.objects.all().delete()
    EpisodeFingerprint.objects.all().delete()  # as before migration 0013
    out = io.StringIO()
    call_command("backfill_near_duplicates", stdout=out)
    assert "1 episodes indexed" in out.getvalue()
    assert EpisodeFingerprint.objects.filter(episode=original).exists()
    call_command("backfill_near_duplicates", stdout=out)  # again: nothing more
    assert EpisodeTrajectory.objects.count() == 1
    copy = upload_episode(collection, parquet_bytes(cut(columns, start=10)), capture)
    assert rejected_as_copy(copy, original)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("s3")
def test_two_copies_decided_at_the_same_time_one_passes(
    fleet_operator, customer, other_customer, monkeypatch
):
    columns = episode_table(frames=600, seed=51)
    episodes, results = [], []
    for owner, data in (
        (customer, parquet_bytes(columns)),
        (other_customer, parquet_bytes(cut(columns, start=1))),
    ):
        collection = Collection(fleet_operator, owner, target_hours="0.1")
        body = collection.register(data).json()
        assert put(body["upload"], data) == 200
        Episode.objects.filter(pk=body["id"]).update(status=Episode.Status.UPLOADED)
        episode = Episode.objects.select_related("job__embodiment", "order").get(pk=body["id"])
        episodes.append(episode)
        results.append(check_episode_file(io.BytesIO(data), episode_expectation(episode)))
        assert results[-1].passed and results[-1].signature is not None
    # Each decision waits (up to 2 s) after its lookup for the other's: without the lock both
    # look up before either stores its keys; with it the second looks up after the first commits.
    looked_up, lookups = threading.Event(), []
    real = qa_service.near_duplicate

    def slow_lookup(episode, signature):
        found = real(episode, signature)
        lookups.append(episode.id)
        if len(lookups) == 2:
            looked_up.set()
        looked_up.wait(timeout=2)
        return found

    monkeypatch.setattr(qa_service, "near_duplicate", slow_lookup)

    def decide(episode, result):
        try:
            episode_record_qa(episode_id=episode.id, result=result, stored_key="")
        finally:
            connection.close()

    threads = [
        threading.Thread(target=decide, args=pair) for pair in zip(episodes, results, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    statuses = sorted(Episode.objects.get(pk=e.id).status for e in episodes)
    assert statuses == [Episode.Status.ACCEPTED, Episode.Status.REJECTED]
    rejected = Episode.objects.get(pk__in=[e.id for e in episodes], status="rejected")
    assert [f["code"] for f in rejected.qa_failures] == [Reason.NEAR_DUPLICATE]
