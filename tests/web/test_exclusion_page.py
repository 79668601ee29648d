"""The customer's exclusion page: operators with their flags, a confirmed exclusion (asked
again on a page of its own), the audit list; a delivered order's episodes are claimed in the
acceptance window (issue 28: re-checked, disputed, decided by staff; the claim's state and the
decision shown); another organization's order is a 404."""

import pytest
from django.test import Client

from datasets.models import Claim, Delivery, Dispute, Episode, EpisodeExclusion
from datasets.services.disputes import dispute_decide
from marketplace.models import User
from tests.datasets.test_deliveries import pilot  # noqa: F401 (fixture)
from tests.datasets.test_delivery_versions import two_operators  # noqa: F401 (fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]


def test_the_page_asks_again_then_claims_delivered_episodes_decided_by_staff(
    two_operators,  # noqa: F811
    customer,
    other_customer,
    django_capture_on_commit_callbacks,
):
    collection, _v1 = two_operators
    url = f"/orders/{collection.order.id}/exclusions/"
    browser = customer.session_client()
    page = browser.get(url).content.decode()
    assert 'data-operator="op-a"' in page and 'id="acceptance-window"' in page
    assert 'id="exclusions-empty"' in page and 'id="rejection-allowance"' in page
    body = {"operator": "op-a", "reason_code": "jerky", "note": "shaky", "remedy": "credit"}
    # the first POST only asks again
    asked = browser.post(url, body).content.decode()
    assert 'id="confirm-page"' in asked and "operator op-a" in asked
    assert "Claim these episodes?" in asked
    assert not Claim.objects.exists()
    # confirmed: a claim, re-checked; not confirmed, so a dispute: nothing excluded yet
    with django_capture_on_commit_callbacks(execute=True):
        done = browser.post(url, {**body, "confirmed": "yes"})
    assert done.status_code == 302
    claim = Claim.objects.get()
    (item,) = claim.items.all()
    assert (item.reason_code, item.note, item.status) == ("jerky", "", "disputed")
    assert claim.note == "shaky" and not EpisodeExclusion.objects.exists()
    listed = browser.get(url).content.decode()
    assert f'data-claim="{claim.id}" data-status="disputed"' in listed
    assert "The fleet may answer until" in listed
    # staff grant it: credited, a v2 without op-a, and the page says so
    dispute = claim.disputes.get()
    Dispute.objects.filter(pk=dispute.pk).update(answer_due_at=dispute.created_at)
    with django_capture_on_commit_callbacks(execute=True):
        dispute_decide(
            staff_label="staff:judge", dispute_id=dispute.id, decision="granted", note="shaky"
        )
    (row,) = EpisodeExclusion.objects.all()
    assert (row.operator, row.scope, row.remedy, row.note) == (
        "op-a",
        "acceptance",
        "credit",
        "shaky",
    )
    assert Episode.objects.get(pk=row.episode_id).status == Episode.Status.EXCLUDED
    v2 = Delivery.objects.get(order=collection.order, version=2)
    assert v2.status == Delivery.Status.READY and v2.episodes == 1
    listed = browser.get(url).content.decode()
    assert f'data-episode="{row.episode_id}"' in listed and "The motion is jerky" in listed
    assert 'class="dispute-decision">granted<' in listed
    assert other_customer.session_client().get(url).status_code == 404
    assert (
        other_customer.session_client().post(url, {**body, "confirmed": "yes"}).status_code == 404
    )


def test_a_refused_exclusion_says_why(
    two_operators,  # noqa: F811
    customer,
):
    collection, _ = two_operators
    url = f"/orders/{collection.order.id}/exclusions/"
    browser = customer.session_client()
    response = browser.post(
        url,
        {"operator": "", "episodes": "", "reason_code": "idle", "confirmed": "yes"},
        follow=True,
    )
    assert "Name 1 to 1000 delivered episodes" in response.content.decode()
    assert EpisodeExclusion.objects.count() == 0


def test_garbage_episode_ids_are_a_message_not_a_500(
    two_operators,  # noqa: F811
    customer,
):
    collection, _ = two_operators
    response = customer.session_client().post(
        f"/orders/{collection.order.id}/exclusions/",
        {"episodes": "not-a-uuid \x01", "reason_code": "idle", "confirmed": "yes"},
        follow=True,
    )
    assert response.status_code == 200
    assert "Not an episode id" in response.content.decode()
    assert EpisodeExclusion.objects.count() == 0


def test_the_pilot_review_form_names_reasons_and_asks_for_recollection(
    pilot,  # noqa: F811
    customer,
    django_capture_on_commit_callbacks,
):
    collection, _held, delivery = pilot
    browser = customer.session_client()
    page = browser.get(f"/orders/{collection.order.id}/").content.decode()
    assert 'name="reason_codes" value="jerky"' in page and 'id="pilot-recollect"' in page
    with django_capture_on_commit_callbacks(execute=True):
        response = browser.post(
            f"/deliveries/{delivery.id}/review/",
            {
                "decision": "reject",
                "reason": "too slow",
                "reason_codes": ["idle", "jerky"],
                "recollect": "yes",
            },
            follow=True,
        )
    assert "collected again and delivered as a new version" in response.content.decode()
    delivery.refresh_from_db()
    assert delivery.review_codes == ["idle", "jerky"] and delivery.superseded_at is not None
    (row,) = EpisodeExclusion.objects.all()
    assert (row.scope, row.reason_code) == ("pilot_review", "idle")


def test_staff_exclude_from_the_staff_page_and_customers_cannot_open_it(
    two_operators,  # noqa: F811
    customer,
    django_capture_on_commit_callbacks,
):
    collection, _ = two_operators
    url = f"/staff/orders/{collection.order.id}/exclusions/"
    assert customer.session_client().get(url).status_code == 403
    staff = Client()
    staff.force_login(User.objects.create_user(username="stella", password="x", is_staff=True))
    assert 'data-operator="op-b"' in staff.get(url).content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        done = staff.post(
            url, {"operator": "op-b", "reason_code": "low_quality", "confirmed": "yes"}
        )
    assert done.status_code == 302
    (row,) = EpisodeExclusion.objects.all()
    assert row.actor_label == "staff:stella" and row.operator == "op-b"
    collection.order.refresh_from_db()
    assert collection.order.status == "in_collection"
