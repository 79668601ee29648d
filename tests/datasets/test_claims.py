"""Claims and disputes (issue 28, items 1-3): one window per order, an episode claimed once,
re-collection once, the allowance counting exclusions made during collection, the re-check,
the fleet's answer and the staff's decision, who may claim, and no links to credited episodes
or to a version whose successor is ready. The money side: tests/billing/test_claims_money.py."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from datasets.models import (
    Claim,
    ClaimEvent,
    ClaimItem,
    Delivery,
    Dispute,
    Episode,
    EpisodeExclusion,
    Recollection,
)
from datasets.services.claims import claim_recheck
from datasets.services.exclusions import episodes_exclude
from datasets.services.sweep import claims_sweep
from fleets.models import Job
from marketplace.errors import ServiceError
from orders.models import Order
from tests.datasets.claim_helpers import (
    BILLING,
    MEMBER,
    claim_of,
    decide,
    deliver,
    file_claim,
    paused_table,
    role_client,
)
from tests.datasets.helpers import Collection, upload_episode
from tests.datasets.test_deliveries import link
from tests.datasets.test_exclusions import assign
from tests.factories import OrderFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]


def _collection(fleet_operator, customer) -> Collection:
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("0.02"),
        environments=1,
    )
    return Collection(fleet_operator, customer, target_hours="0.02", order=order)


@pytest.fixture
def delivered(fleet_operator, customer, django_capture_on_commit_callbacks):
    """A 0.02 h order delivered (v1) from six 12 s episodes; the first labelled a failure."""
    collection = _collection(fleet_operator, customer)
    v1 = deliver(
        collection,
        django_capture_on_commit_callbacks,
        [{"seed": 100 + i, "success": i != 0} for i in range(6)],
    )
    return collection, v1


def _open_for_staff(dispute: Dispute) -> None:
    """The fleet's time to answer is over."""
    Dispute.objects.filter(pk=dispute.pk).update(
        answer_due_at=timezone.now() - timedelta(seconds=1)
    )


def test_an_episode_is_claimed_once_and_the_window_does_not_restart_with_v2(
    delivered, customer, settings, django_capture_on_commit_callbacks
):
    settings.CLAIM_AUTO_GRANT_SHARE = Decimal("1")
    capture = django_capture_on_commit_callbacks
    collection, v1 = delivered
    failed, kept, third = v1.episode_ids[0], v1.episode_ids[1], v1.episode_ids[2]
    # on v1: the failed one credited at once; another disputed, then refused by staff
    claim = claim_of(
        file_claim(
            customer.client,
            v1,
            capture,
            remedy="credit",
            items=[
                {"episode": failed, "reason_code": "failed_task"},
                {"episode": kept, "reason_code": "wrong_task", "note": "a cup, not a peg"},
            ],
        )
    )
    (dispute,) = claim.disputes.all()
    _open_for_staff(dispute)
    decide(dispute, capture, "refused", note="it is a peg")
    v2 = Delivery.objects.get(order=collection.order, version=2)
    assert v2.status == Delivery.Status.READY and kept in v2.episode_ids
    # when: the same episodes again on v2
    again = file_claim(
        customer.client, v2, capture, remedy="recollect", episodes=[kept], reason_code="idle"
    )
    gone = file_claim(
        customer.client, v2, capture, remedy="recollect", episodes=[failed], reason_code="idle"
    )
    # then: refused, nothing changes
    assert again.status_code == 409 and again.json()["code"] == "episode_already_claimed"
    assert gone.status_code == 400 and "items" in gone.json()["fields"]
    assert Claim.objects.count() == 1 and Episode.objects.get(pk=kept).status == "accepted"
    # the window is the order's: v2, ready now, closes when v1's would
    until = customer.client.get(f"/api/v1/deliveries/{v2.id}").json()["acceptance_until"]
    assert until == customer.client.get(f"/api/v1/deliveries/{v1.id}").json()["acceptance_until"]
    Delivery.objects.filter(pk=v1.pk).update(
        ready_at=timezone.now() - timedelta(days=settings.DELIVERY_ACCEPTANCE_DAYS, minutes=1)
    )
    late = file_claim(
        customer.client, v2, capture, remedy="recollect", episodes=[third], reason_code="idle"
    )
    assert late.status_code == 409 and late.json()["code"] == "acceptance_window_closed"
    assert Claim.objects.count() == 1


def test_exclusions_during_collection_count_against_the_allowance(
    fleet_operator, customer, settings, django_capture_on_commit_callbacks
):
    """20 % of the 0.02 h order is 14.4 s: one 12 s exclusion during collection fits, a
    second does not, and after delivery a confirmed claim is no longer granted at once."""
    settings.CLAIM_AUTO_GRANT_SHARE = Decimal("0.20")
    capture = django_capture_on_commit_callbacks
    collection = _collection(fleet_operator, customer)
    first = [
        upload_episode(collection, parquet_bytes_of(120 + i), capture, operator="op-a")
        for i in range(3)
    ]
    url = f"/api/v1/orders/{collection.order.id}/exclusions"
    with capture(execute=True):
        excluded = customer.client.post(
            url, {"episodes": [str(first[0].id)], "reason_code": "idle"}, format="json"
        )
    assert excluded.status_code == 201, excluded.json()
    assert EpisodeExclusion.objects.get().against_allowance
    beyond = customer.client.post(
        url, {"episodes": [str(first[1].id)], "reason_code": "idle"}, format="json"
    )
    assert beyond.status_code == 409 and beyond.json()["code"] == "rejection_allowance_exceeded"
    assert Episode.objects.get(pk=first[1].id).status == Episode.Status.ACCEPTED
    # the order is completed and delivered; one episode is labelled a failure
    v1 = deliver(
        collection,
        capture,
        [{"seed": 130 + i, "success": i != 0, "operator": "op-b"} for i in range(4)],
    )
    failed = Episode.objects.get(order=collection.order, success=False)
    # when: a claim the re-check confirms
    claim = claim_of(
        file_claim(
            customer.client,
            v1,
            capture,
            remedy="recollect",
            episodes=[str(failed.id)],
            reason_code="failed_task",
        )
    )
    # then: 12 s excluded during collection leave 2.4 s: a dispute, nothing granted
    (item,) = claim.items.all()
    assert item.status == ClaimItem.Status.DISPUTED
    assert item.route == "Disputed: beyond the order's rejection allowance."
    assert Episode.objects.get(pk=failed.id).status == Episode.Status.ACCEPTED


def parquet_bytes_of(seed: int) -> bytes:
    from datasets.episode_format import episode_table, parquet_bytes

    return parquet_bytes(episode_table(frames=360, seed=seed))


def test_rejected_hours_are_recollected_once_a_second_round_only_by_staff(
    delivered, customer, settings, django_capture_on_commit_callbacks
):
    settings.CLAIM_AUTO_GRANT_SHARE = Decimal("1")
    capture = django_capture_on_commit_callbacks
    collection, v1 = delivered
    failed = v1.episode_ids[0]
    claim_of(
        file_claim(
            customer.client,
            v1,
            capture,
            remedy="recollect",
            episodes=[failed],
            reason_code="failed_task",
        )
    )
    order = collection.order
    order.refresh_from_db()
    assert order.status == Order.Status.IN_COLLECTION
    (again,) = Job.objects.filter(order=order).exclude(pk=collection.job.pk)
    assert Recollection.objects.get(job=again).source_job_id == collection.job.pk
    # v1 is superseded but its successor is not ready: v1 still issues links
    assert link(customer.client, v1.id).status_code == 302
    # the re-collection is delivered as v2; then v1 issues no new links
    collection.job = assign(again, collection)
    deliver(collection, capture, [{"seed": 140, "success": False, "operator": "op-c"}])
    v2 = Delivery.objects.get(order=order, version=2, status=Delivery.Status.READY)
    refused = link(customer.client, v1.id)
    assert refused.status_code == 409 and refused.json()["code"] == "delivery_superseded"
    assert link(customer.client, v2.id).status_code == 302
    replacement = Episode.objects.get(job=again, status=Episode.Status.ACCEPTED)
    # when: the customer wants the re-collected hours collected again
    second = file_claim(
        customer.client,
        v2,
        capture,
        remedy="recollect",
        episodes=[str(replacement.id)],
        reason_code="failed_task",
    )
    # then: refused (credit remains possible); staff may order a second round
    assert second.status_code == 409 and second.json()["code"] == "recollection_exhausted"
    assert Job.objects.filter(order=order).count() == 2
    with capture(execute=True):
        result = episodes_exclude(
            order_id=order.id,
            staff_label="staff:ops",
            episode_ids=[replacement.id],
            reason_code="failed_task",
        )
    assert len(result.recollection_jobs) == 1 and Job.objects.filter(order=order).count() == 3


def test_credited_episodes_get_no_links_in_any_version(
    delivered, customer, settings, django_capture_on_commit_callbacks
):
    settings.CLAIM_AUTO_GRANT_SHARE = Decimal("1")
    capture = django_capture_on_commit_callbacks
    collection, v1 = delivered
    failed = v1.episode_ids[0]
    data = v1.files.get(path__startswith="data/")
    assert failed in data.episode_ids and len(data.episode_ids) == 6
    claim_of(
        file_claim(
            customer.client,
            v1,
            capture,
            remedy="credit",
            episodes=[failed],
            reason_code="failed_task",
        )
    )
    v2 = Delivery.objects.get(order=collection.order, version=2)
    assert v2.status == Delivery.Status.READY and failed not in v2.episode_ids
    # while v2 is being assembled, v1 still issues links, but not to files holding the
    # credited episode (a version assembled before files named their episodes: every data file)
    Delivery.objects.filter(pk=v2.pk).update(status=Delivery.Status.ASSEMBLING)
    assert link(customer.client, v1.id, "meta/info.json").status_code == 302
    for held in (data.episode_ids, []):
        v1.files.filter(pk=data.pk).update(episode_ids=held)
        refused = link(customer.client, v1.id, data.path)
        assert refused.status_code == 409 and refused.json()["code"] == "episodes_credited"
    batch = customer.client.post(
        f"/api/v1/deliveries/{v1.id}/links",
        {"paths": ["meta/info.json", data.path]},
        format="json",
    )
    assert batch.status_code == 409 and batch.json()["fields"]["paths"] == {
        "1": ["Holds credited episodes."]
    }
    web = customer.session_client()
    archive = web.get(f"/deliveries/{v1.id}/archive.tar", follow=True)
    assert archive.status_code == 200 and b"credited for" in archive.content
    assert archive.get("Content-Type", "").startswith("text/html")
    # the episode's own page (clips, poster) is gone too
    assert web.get(f"/orders/{collection.order.id}/episodes/{failed}/").status_code == 404
    # once v2 is ready, v1 issues nothing at all and v2 everything it holds
    Delivery.objects.filter(pk=v2.pk).update(status=Delivery.Status.READY)
    assert link(customer.client, v1.id, "meta/info.json").status_code == 409
    v2_data = v2.files.get(path__startswith="data/")
    assert link(customer.client, v2.id, v2_data.path).status_code == 302


def test_the_fleet_answers_and_staff_grant_exactly_the_named_episodes(
    delivered, customer, fleet_operator, make_tenant, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    collection, v1 = delivered
    claim = claim_of(
        file_claim(
            customer.client,
            v1,
            capture,
            remedy="recollect",
            episodes=v1.episode_ids[:4],
            reason_code="camera",
            note="the wrist camera is blocked",
        )
    )
    (dispute,) = claim.disputes.all()
    assert {i.recheck for i in claim.items.all()} == {ClaimItem.Recheck.NOT_RUN}
    url = f"/api/v1/fleet/disputes/{dispute.id}"
    # staff cannot decide while the fleet may still answer
    with pytest.raises(ServiceError) as early:
        decide(dispute, capture, "granted")
    assert early.value.code == "dispute_awaiting_fleet"
    # other fleets do not see it; the fleet's billing role reads but does not answer
    stranger = make_tenant(fleet_operator.organization.kind)
    assert stranger.client.get(url).status_code == 404
    assert stranger.client.post(f"{url}/answer", {"answer": "x"}, format="json").status_code == 404
    billing = role_client(fleet_operator.organization, BILLING)
    assert billing.get(url).status_code == 200
    assert billing.post(f"{url}/answer", {"answer": "x"}, format="json").status_code == 403
    empty = fleet_operator.client.post(f"{url}/answer", {"answer": "  "}, format="json")
    assert empty.status_code == 400
    answered = fleet_operator.client.post(
        f"{url}/answer", {"answer": "Two were blocked, not four."}, format="json"
    )
    assert answered.status_code == 200, answered.json()
    twice = fleet_operator.client.post(f"{url}/answer", {"answer": "more"}, format="json")
    assert twice.status_code == 409 and twice.json()["code"] == "dispute_closed"
    # partial means some, named, with a note
    named = v1.episode_ids[1:3]
    for bad in (
        {"episodes": v1.episode_ids[:4]},
        {"episodes": []},
        {"episodes": [v1.episode_ids[5]]},
    ):
        with pytest.raises(ServiceError) as wrong:
            decide(dispute, capture, "partial", **bad)
        assert "episodes" in wrong.value.fields
    with pytest.raises(ServiceError) as unexplained:
        decide(dispute, capture, "partial", episodes=named, note=" ")
    assert "note" in unexplained.value.fields
    decide(dispute, capture, "partial", episodes=named, note="two blocked on the clips")
    # then: exactly the named two are excluded and re-collected; the others stay
    excluded = set(EpisodeExclusion.objects.values_list("episode_id", flat=True))
    assert {str(e) for e in excluded} == set(named)
    states = {str(i.episode_id): i.status for i in claim.items.all()}
    assert states == {
        v1.episode_ids[0]: "refused",
        named[0]: "granted",
        named[1]: "granted",
        v1.episode_ids[3]: "refused",
    }
    (recollect,) = Job.objects.filter(order=collection.order).exclude(pk=collection.job.pk)
    assert recollect.target_seconds == Decimal("24.000")
    body = customer.client.get(f"/api/v1/claims/{claim.id}").json()
    assert body["disputes"][0]["answer"] == "Two were blocked, not four."
    assert body["disputes"][0]["decision"] == "partial"
    assert [e["action"] for e in body["events"]] == [
        "filed",
        "rechecked",
        "disputed",
        "answered",
        "decided",
    ]
    assert body["events"][-1]["actor"] == "staff"  # which staff member stays internal
    with pytest.raises(ServiceError) as again:
        decide(dispute, capture, "granted")
    assert again.value.code == "dispute_closed"


def test_an_unanswered_dispute_goes_to_staff_and_is_never_granted_by_itself(
    delivered, customer, fleet_operator, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    _, v1 = delivered
    claim = claim_of(
        file_claim(
            customer.client,
            v1,
            capture,
            remedy="credit",
            episodes=v1.episode_ids[:2],
            reason_code="wrong_task",
        )
    )
    (dispute,) = claim.disputes.all()
    assert claims_sweep() == 0  # not due yet
    _open_for_staff(dispute)
    # when
    assert claims_sweep() == 1
    # then
    dispute.refresh_from_db()
    assert dispute.status == Dispute.Status.AWAITING_DECISION and dispute.decision == ""
    assert ClaimEvent.objects.filter(dispute=dispute, action="answer_time_up").count() == 1
    assert not EpisodeExclusion.objects.exists()
    assert set(claim.items.values_list("status", flat=True)) == {"disputed"}
    assert claims_sweep() == 0
    late = fleet_operator.client.post(
        f"/api/v1/fleet/disputes/{dispute.id}/answer", {"answer": "too late"}, format="json"
    )
    assert late.status_code == 409 and late.json()["code"] == "dispute_closed"


def test_who_may_claim_money_and_who_may_claim_recollection(
    delivered, customer, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    _, v1 = delivered
    organization = customer.organization
    member, billing = role_client(organization, MEMBER), role_client(organization, BILLING)
    body = {"episodes": v1.episode_ids[:1], "reason_code": "wrong_task"}
    for client, remedy in ((member, "credit"), (billing, "recollect")):
        refused = file_claim(client, v1, capture, remedy=remedy, **body)
        assert refused.status_code == 403 and refused.json()["code"] == "claim_role_refused"
    assert not Claim.objects.exists()
    by_member = file_claim(member, v1, capture, remedy="recollect", **body)
    assert by_member.status_code == 201
    body["episodes"] = v1.episode_ids[1:2]
    by_billing = file_claim(billing, v1, capture, remedy="credit", **body)
    assert by_billing.status_code == 201


def test_hostile_claims_are_refused_and_change_nothing(
    delivered, customer, other_customer, fleet_operator, django_capture_on_commit_callbacks
):
    capture = django_capture_on_commit_callbacks
    collection, v1 = delivered
    episode = v1.episode_ids[0]
    ok = {"remedy": "credit", "episodes": [episode], "reason_code": "idle"}
    assert file_claim(other_customer.client, v1, capture, **ok).status_code == 404
    assert file_claim(fleet_operator.client, v1, capture, **ok).status_code == 403
    cases = [
        {"remedy": "credit"},
        {"remedy": "refund", "episodes": [episode], "reason_code": "idle"},
        {"remedy": "credit", "episodes": ["not-a-uuid"], "reason_code": "idle"},
        {"remedy": "credit", "episodes": [episode], "reason_code": "ugly"},
        {"remedy": "credit", "episodes": [str(collection.job.id)], "reason_code": "idle"},
        {"remedy": "credit", "items": [{"episode": episode, "reason_code": "other"}]},
        {
            "remedy": "credit",
            "items": [{"episode": episode, "reason_code": "idle", "note": "\x00"}],
        },
        {
            "remedy": "credit",
            "items": [{"episode": episode, "reason_code": "idle", "start_seconds": 5}],
        },
        {
            "remedy": "credit",
            "items": [
                {"episode": episode, "reason_code": "idle", "start_seconds": 5, "end_seconds": 4}
            ],
        },
        {
            "remedy": "credit",
            "items": [
                {"episode": episode, "reason_code": "idle", "start_seconds": 5, "end_seconds": 5.5}
            ],
        },
        {
            "remedy": "credit",
            "items": [
                {"episode": episode, "reason_code": "idle", "start_seconds": 5, "end_seconds": 99}
            ],
        },
        {
            "remedy": "credit",
            "items": [
                {"episode": episode, "reason_code": "idle"},
                {"episode": episode, "reason_code": "jerky"},
            ],
        },
        {"remedy": "credit", "episodes": [episode] * 1001, "reason_code": "idle"},
    ]
    for body in cases:
        response = file_claim(customer.client, v1, capture, **body)
        assert response.status_code == 400, (body, response.json())
        assert set(response.json()) >= {"code", "message", "fields"}
    pilot = Delivery.objects.create(
        order=collection.order, kind="pilot", status="ready", prefix="p", ready_at=timezone.now()
    )
    assert file_claim(customer.client, pilot, capture, **ok).status_code == 409
    assert not Claim.objects.exists() and not EpisodeExclusion.objects.exists()


def test_the_recheck_measures_the_claimed_range_and_a_person_judges_the_rest(
    fleet_operator, customer, settings, django_capture_on_commit_callbacks
):
    """The paused episode passes QA (idle 40 %): idle over its pause (3.4-8.3 s) is confirmed
    by content QA run again on that range; idle over the whole of a clean one, jerky motion
    and low quality are not; a wrong task needs a person."""
    settings.CLAIM_AUTO_GRANT_SHARE = Decimal("1")
    capture = django_capture_on_commit_callbacks
    collection = _collection(fleet_operator, customer)
    v1 = deliver(
        collection,
        capture,
        [{"table": paused_table(150)}] + [{"seed": 151 + i} for i in range(5)],
    )
    paused, clean = v1.episode_ids[0], v1.episode_ids[1:]
    items = [
        {"episode": paused, "reason_code": "idle", "start_seconds": "3.4", "end_seconds": "8.3"},
        {"episode": clean[0], "reason_code": "idle"},
        {"episode": clean[1], "reason_code": "jerky", "start_seconds": 1, "end_seconds": 6},
        {"episode": clean[2], "reason_code": "low_quality"},
        {"episode": clean[3], "reason_code": "wrong_task", "note": "a cup"},
    ]
    claim = claim_of(file_claim(customer.client, v1, capture, remedy="credit", items=items))
    got = {str(i.episode_id): (i.status, i.recheck) for i in claim.items.all()}
    assert got == {
        paused: ("granted", "confirmed"),
        clean[0]: ("disputed", "not_confirmed"),
        clean[1]: ("disputed", "not_confirmed"),
        clean[2]: ("disputed", "not_confirmed"),
        clean[3]: ("disputed", "not_run"),
    }
    detail = ClaimItem.objects.get(episode_id=paused).recheck_detail
    assert detail.startswith("from 3.400 s to 8.300 s: Idle 100%")
    assert ClaimItem.objects.get(episode_id=clean[3]).route == (
        "Disputed: this reason needs a person to judge."
    )


def test_a_claim_whose_recheck_was_lost_is_rechecked_by_the_sweep(
    delivered, customer, settings, django_capture_on_commit_callbacks
):
    """The re-check's message was lost (the broker was down): the claim stays `checking`, a
    second claim waits for it, and claims_sweep queues the re-check again."""
    settings.CLAIM_AUTO_GRANT_SHARE = Decimal("1")
    _, v1 = delivered
    body = {"remedy": "credit", "episodes": v1.episode_ids[:1], "reason_code": "failed_task"}
    with django_capture_on_commit_callbacks(execute=False):  # nothing queued runs
        filed = customer.client.post(f"/api/v1/deliveries/{v1.id}/claims", body, format="json")
    claim = claim_of(filed)
    assert claim.status == Claim.Status.CHECKING
    second = customer.client.post(
        f"/api/v1/deliveries/{v1.id}/claims",
        {**body, "episodes": v1.episode_ids[1:2]},
        format="json",
    )
    assert second.status_code == 409 and second.json()["code"] == "claim_in_progress"
    assert claims_sweep() == 0  # not stale yet
    Claim.objects.filter(pk=claim.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.CLAIM_RECHECK_STALE_SECONDS + 1)
    )
    # when
    with django_capture_on_commit_callbacks(execute=True):
        assert claims_sweep() == 1
    # then: decided once (the failed one granted), and a rerun changes nothing
    claim.refresh_from_db()
    assert claim.status == Claim.Status.DECIDED
    assert claim.items.get().status == ClaimItem.Status.GRANTED
    assert EpisodeExclusion.objects.count() == 1
    claim_recheck(claim_id=claim.id)
    assert EpisodeExclusion.objects.count() == 1


def test_only_the_files_holding_a_credited_episode_are_refused(
    fleet_operator, customer, settings, django_capture_on_commit_callbacks
):
    """Data files rolled over after every episode: once the first is credited, v1 (its
    successor still assembling) refuses the file holding it and signs the others."""
    settings.CLAIM_AUTO_GRANT_SHARE = Decimal("1")
    settings.DELIVERY_DATA_FILE_BYTES = 1
    capture = django_capture_on_commit_callbacks
    collection = _collection(fleet_operator, customer)
    v1 = deliver(collection, capture, [{"seed": 160 + i, "success": i != 0} for i in range(6)])
    data = {f.episode_ids[0]: f.path for f in v1.files.filter(path__startswith="data/")}
    assert sorted(data) == sorted(v1.episode_ids)  # one file per episode
    failed, other = v1.episode_ids[0], v1.episode_ids[1]
    claim_of(
        file_claim(
            customer.client,
            v1,
            capture,
            remedy="credit",
            episodes=[failed],
            reason_code="failed_task",
        )
    )
    Delivery.objects.filter(order=collection.order, version=2).update(
        status=Delivery.Status.ASSEMBLING
    )
    refused = link(customer.client, v1.id, data[failed])
    assert refused.status_code == 409 and refused.json()["code"] == "episodes_credited"
    assert link(customer.client, v1.id, data[other]).status_code == 302
