"""Excluding accepted episodes (issue 16, item 3): not counted, re-collected, not paid, audited;
the hostile cases (twice, another order's episode, a fleet, re-sending the same file).
Since issue 28 a customer excludes only undelivered episodes (delivered ones are claimed:
tests/datasets/test_claims.py): the exclusions of a delivered order here are staff's."""

from decimal import Decimal

import pytest

from billing.models import FleetPayable, LedgerEntry, LedgerTransaction, PayableDeduction
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Delivery, Episode, EpisodeExclusion
from datasets.services.exclusions import episodes_exclude
from fleets.models import Assignment, Job
from marketplace.errors import Conflict
from orders.models import Order
from tests.datasets.helpers import Collection, upload_episode
from tests.datasets.test_delivery_versions import two_operators  # noqa: F401 (fixture)
from tests.factories import JobFactory
from tests.fleets.test_operators import checked

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]


def exclude(client, order, capture=None, **body):
    url = f"/api/v1/orders/{order.id}/exclusions"
    if capture is None:
        return client.post(url, body, format="json")
    with capture(execute=True):
        return client.post(url, body, format="json")


def staff_exclude(order, capture, **kwargs):
    with capture(execute=True):
        return episodes_exclude(order_id=order.id, staff_label="staff:ops", **kwargs)


def assign(job: Job, collection: Collection) -> Job:
    """What dispatch leaves when the fleet accepts the re-collection job."""
    job.status, job.fleet, job.site = Job.Status.ASSIGNED, collection.site.fleet, collection.site
    job.save()
    Assignment.objects.create(
        job=job,
        fleet=collection.site.fleet,
        site=collection.site,
        rate_per_hour=Decimal("50.00"),
        currency=job.order.currency,
    )
    return job


def test_excluding_an_operator_uncounts_recollects_reverses_the_payable_and_is_audited(
    two_operators,  # noqa: F811
    customer,
    django_capture_on_commit_callbacks,
):
    collection, v1 = two_operators
    order, job = collection.order, collection.job
    payable = FleetPayable.objects.get(job=job)
    assert payable.accepted_seconds == Decimal("36.000") and payable.payout_id is None
    paid_before = payable.amount
    # when
    result = staff_exclude(
        order,
        django_capture_on_commit_callbacks,
        operator="op-a",
        reason_code="idle",
        note="stands still",
    )
    # then
    assert [e.operator for e in result.excluded] == ["op-a"]
    assert result.seconds == Decimal("16.000")  # 36 counted, op-b's 20 s stay
    assert result.excluded[0].actor_label == "staff:ops"
    assert Episode.objects.get(order=order, operator="op-a").status == Episode.Status.EXCLUDED
    job.refresh_from_db()
    order.refresh_from_db()
    assert job.accepted_seconds == Decimal("20.000") == order.accepted_seconds
    assert order.status == Order.Status.IN_COLLECTION
    (extra,) = Job.objects.filter(order=order).exclude(pk=job.pk)
    assert extra in result.recollection_jobs
    assert extra.target_hours == Decimal("0.01") and extra.status != Job.Status.COMPLETED
    v1.refresh_from_db()
    assert v1.superseded_at is not None
    # the fleet is not paid for the excluded time: the unpaid payable itself is reduced
    payable.refresh_from_db()
    assert payable.accepted_seconds == Decimal("20.000")
    (deduction,) = PayableDeduction.objects.filter(payable=payable)
    assert deduction.in_place and deduction.amount == paid_before - payable.amount > 0
    txn = LedgerTransaction.objects.get(key=f"deduction:{deduction.id}")
    assert sum(e.amount for e in LedgerEntry.objects.filter(transaction=txn)) == 0
    # the audit: one append-only row, listed for the customer
    listed = customer.client.get(f"/api/v1/orders/{order.id}/exclusions").json()["results"]
    assert [(r["operator"], r["reason_code"], r["note"]) for r in listed] == [
        ("op-a", "idle", "stands still")
    ]
    row = EpisodeExclusion.objects.get()
    with pytest.raises(ValueError, match="append-only"):
        row.save()


def test_excluding_twice_counts_once(
    two_operators,  # noqa: F811
    django_capture_on_commit_callbacks,
):
    collection, _ = two_operators
    episode = Episode.objects.get(order=collection.order, operator="op-b")
    capture = django_capture_on_commit_callbacks
    first = staff_exclude(collection.order, capture, episode_ids=[episode.id], reason_code="jerky")
    assert len(first.excluded) == 1
    again = staff_exclude(collection.order, capture, episode_ids=[episode.id], reason_code="jerky")
    assert again.already == 1 and again.excluded == [] and again.seconds == 0
    collection.job.refresh_from_db()
    assert collection.job.accepted_seconds == Decimal("20.000")
    assert EpisodeExclusion.objects.count() == PayableDeduction.objects.count() == 1
    assert Job.objects.filter(order=collection.order).count() == 2


@pytest.fixture
def collecting(fleet_operator, customer, django_capture_on_commit_callbacks):
    """A 1 h order still in collection with two accepted 20 s episodes (op-a, op-b)."""
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    for seed, operator in ((11, "op-a"), (12, "op-b")):
        upload_episode(
            collection,
            parquet_bytes(episode_table(frames=600, seed=seed)),
            django_capture_on_commit_callbacks,
            operator=operator,
        )
    return collection


def test_hostile_callers_and_bad_requests(
    collecting,
    two_operators,  # noqa: F811
    customer,
    other_customer,
    fleet_operator,
):
    collection = collecting
    episode = Episode.objects.get(order=collection.order, operator="op-b")
    elsewhere = checked(
        Collection(fleet_operator, other_customer), "op-b", accepted=True, quality=0.9
    )
    body = {"episodes": [str(episode.id)], "reason_code": "idle"}
    assert exclude(other_customer.client, collection.order, **body).status_code == 404
    assert exclude(fleet_operator.client, collection.order, **body).status_code == 403
    foreign = exclude(
        customer.client, collection.order, episodes=[str(elsewhere.id)], reason_code="idle"
    )
    assert foreign.status_code == 404 and foreign.json()["code"] == "not_found"
    unknown = exclude(customer.client, collection.order, operator="nobody", reason_code="idle")
    assert unknown.status_code == 404
    bad_code = exclude(customer.client, collection.order, operator="op-b", reason_code="ugly")
    assert bad_code.status_code == 400 and "reason_code" in bad_code.json()["fields"]
    no_note = exclude(customer.client, collection.order, operator="op-b", reason_code="other")
    assert no_note.status_code == 400 and "note" in no_note.json()["fields"]
    both = exclude(customer.client, collection.order, reason_code="idle")
    assert both.status_code == 400
    nul = exclude(
        customer.client, collection.order, operator="op-b", reason_code="idle", note="\x00"
    )
    assert nul.status_code == 400
    # a delivered order's episodes are claimed, not excluded (issue 28)
    delivered, _ = two_operators
    shown = Episode.objects.filter(order=delivered.order).first()
    late = exclude(customer.client, delivered.order, episodes=[str(shown.id)], reason_code="idle")
    assert late.status_code == 409 and late.json()["code"] == "episode_delivered"
    assert EpisodeExclusion.objects.count() == 0
    assert Episode.objects.get(pk=episode.id).status == Episode.Status.ACCEPTED


def test_an_excluded_file_sent_again_is_refused_and_never_paid(
    two_operators,  # noqa: F811
    customer,
    django_capture_on_commit_callbacks,
):
    collection, _ = two_operators
    original = Episode.objects.get(order=collection.order, operator="op-a")
    staff_exclude(
        collection.order, django_capture_on_commit_callbacks, operator="op-a", reason_code="idle"
    )
    extra = Job.objects.filter(order=collection.order).exclude(pk=collection.job.pk).get()
    collection.job = assign(extra, collection)
    # when: the fleet sends op-a's file again for the re-collection job
    response = collection.register(
        parquet_bytes(episode_table(frames=600, seed=1)), operator="op-c"
    )
    # then
    assert response.status_code == 409 and response.json()["code"] == "duplicate_episode"
    assert str(original.id) in response.json()["message"]
    extra.refresh_from_db()
    assert extra.accepted_seconds == 0


def test_staff_exclude_any_order_and_a_closed_order_refuses(
    two_operators,  # noqa: F811
    django_capture_on_commit_callbacks,
):
    collection, _ = two_operators
    with django_capture_on_commit_callbacks(execute=True):
        result = episodes_exclude(
            order_id=collection.order.id,
            staff_label="staff:ops",
            operator="op-b",
            reason_code="wrong_task",
        )
    assert [e.actor_label for e in result.excluded] == ["staff:ops"]
    Order.objects.filter(pk=collection.order.pk).update(status=Order.Status.CLOSED)
    with pytest.raises(Conflict) as refused:
        episodes_exclude(
            order_id=collection.order.id,
            staff_label="staff:ops",
            operator="op-a",
            reason_code="idle",
        )
    assert refused.value.code == "exclusion_not_allowed"
    assert Delivery.objects.filter(order=collection.order).count() == 1


def test_a_pilot_rejected_with_reason_codes_is_recollected_and_delivered_as_v2(
    fleet_operator, customer, settings, django_capture_on_commit_callbacks
):
    settings.ADMINS = [("Ops", "ops@example.com")]
    capture = django_capture_on_commit_callbacks
    collection = Collection(fleet_operator, customer, target_hours="0.01", is_pilot=True)
    held = JobFactory(order=collection.order, site=None, status=Job.Status.HELD, sequence=99)
    upload_episode(collection, parquet_bytes(episode_table(frames=1200, seed=4)), capture)
    v1 = Delivery.objects.get(order=collection.order)
    url = f"/api/v1/deliveries/{v1.id}/reject"
    no_code = customer.client.post(url, {"reason": "slow", "recollect": True}, format="json")
    assert no_code.status_code == 400 and "reason_codes" in no_code.json()["fields"]
    bad_code = customer.client.post(url, {"reason": "x", "reason_codes": ["nope"]}, format="json")
    assert bad_code.status_code == 400
    # when
    with capture(execute=True):
        response = customer.client.post(
            url,
            {"reason": "grasps too slow", "reason_codes": ["jerky", "idle"], "recollect": True},
            format="json",
        )
    # then
    assert response.status_code == 200, response.json()
    assert response.json()["review_codes"] == ["jerky", "idle"]
    v1.refresh_from_db()
    assert v1.review == Delivery.Review.REJECTED and v1.superseded_at is not None
    (row,) = EpisodeExclusion.objects.filter(order=collection.order)
    assert (row.scope, row.reason_code, row.note) == ("pilot_review", "jerky", "grasps too slow")
    collection.order.refresh_from_db()
    assert collection.order.status == Order.Status.IN_COLLECTION
    (extra,) = Job.objects.filter(order=collection.order, is_pilot=True).exclude(
        pk=collection.job.pk
    )
    held.refresh_from_db()
    assert held.status == Job.Status.HELD  # the rest waits for the new pilot's approval
    # the re-collected pilot is delivered as v2, pending review; v1 cannot be reviewed again
    collection.job = assign(extra, collection)
    upload_episode(collection, parquet_bytes(episode_table(frames=1200, seed=5)), capture)
    v2 = Delivery.objects.get(order=collection.order, kind="pilot", version=2)
    assert v2.status == Delivery.Status.READY and v2.review == Delivery.Review.PENDING
    again = customer.client.post(f"/api/v1/deliveries/{v1.id}/approve", {}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "delivery_superseded"


def test_excluding_from_a_job_still_collecting_leaves_it_more_to_fill(
    fleet_operator, customer, django_capture_on_commit_callbacks
):
    collection = Collection(fleet_operator, customer, target_hours="0.1")
    first = upload_episode(
        collection,
        parquet_bytes(episode_table(frames=600, seed=7)),
        django_capture_on_commit_callbacks,
    )
    upload_episode(
        collection,
        parquet_bytes(episode_table(frames=600, seed=8)),
        django_capture_on_commit_callbacks,
    )
    response = exclude(
        customer.client,
        collection.order,
        django_capture_on_commit_callbacks,
        episodes=[str(first.id)],
        reason_code="failed_task",
    )
    assert response.status_code == 201 and response.json()["recollection_jobs"] == []
    collection.job.refresh_from_db()
    collection.order.refresh_from_db()
    assert collection.job.accepted_seconds == Decimal("20.000") == collection.order.accepted_seconds
    assert collection.job.status == Job.Status.IN_PROGRESS
    assert collection.order.status == Order.Status.IN_COLLECTION
    assert Job.objects.filter(order=collection.order).count() == 1


def test_a_recollection_collects_and_pays_exactly_the_excluded_seconds(
    two_operators,  # noqa: F811
    customer,
    fleet_operator,
    django_capture_on_commit_callbacks,
):
    """16 s excluded: the new job plans 0.01 h (36 s) of capacity but counts and pays 16 s."""
    collection, _ = two_operators
    order = collection.order
    result = staff_exclude(
        order, django_capture_on_commit_callbacks, operator="op-a", reason_code="idle"
    )
    assert result.seconds == Decimal("16")
    (extra,) = Job.objects.filter(order=order).exclude(pk=collection.job.pk)
    assert extra.target_hours == Decimal("0.01") and extra.target_seconds == Decimal("16.000")
    assign(extra, collection)
    listed = fleet_operator.client.get("/api/v1/fleet/jobs").json()["results"]
    (shown,) = [j for j in listed if j["id"] == str(extra.id)]
    assert Decimal(shown["target_seconds"]) == Decimal("16.000")
    collection.job = extra
    # when: another operator sends a 20 s episode (more than is missing)
    episode = upload_episode(
        collection,
        parquet_bytes(episode_table(frames=600, seed=31)),
        django_capture_on_commit_callbacks,
        operator="op-c",
    )
    # then: 16 s count, the job is complete, a second episode is refused as surplus
    assert episode.status == Episode.Status.ACCEPTED, episode.qa_failures
    extra.refresh_from_db()
    order.refresh_from_db()
    assert extra.accepted_seconds == Decimal("16.000") and extra.status == Job.Status.COMPLETED
    assert order.accepted_seconds == Decimal("36.000")
    payable = FleetPayable.objects.get(job=extra)
    assert payable.accepted_seconds == Decimal("16.000")
    assert payable.amount == (Decimal("16") * Decimal("50.00") / 3600).quantize(Decimal("0.01"))
