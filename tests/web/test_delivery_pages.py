"""The order page's QA and deliveries section, audited downloads and pilot review, by web."""

import urllib.request

import pytest
from django.test import Client

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Delivery, DownloadEvent
from fleets.models import Job
from orders.models import Order
from tests.datasets.helpers import Collection, upload_episode
from tests.factories import JobFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]


def logged_in(tenant) -> Client:
    client = Client()
    client.force_login(tenant.user)
    return client


@pytest.fixture
def pilot(fleet_operator, customer, django_capture_on_commit_callbacks):
    collection = Collection(fleet_operator, customer, target_hours="0.01", is_pilot=True)
    JobFactory(order=collection.order, site=None, status=Job.Status.HELD, sequence=99)
    broken = episode_table(frames=300, seed=9)
    broken["action"][4, 1] = float("nan")
    upload_episode(collection, parquet_bytes(broken), django_capture_on_commit_callbacks)
    upload_episode(
        collection, parquet_bytes(episode_table(frames=1200)), django_capture_on_commit_callbacks
    )
    return collection, Delivery.objects.get(order=collection.order)


def test_the_order_page_shows_qa_coverage_and_the_pilot(pilot, customer):
    collection, delivery = pilot
    html = logged_in(customer).get(f"/orders/{collection.order.id}/").content.decode()
    assert 'id="qa-summary"' in html and "<code>non_finite</code>: 1" in html
    assert 'id="operators"' in html and "op-7" in html
    assert f"/deliveries/{delivery.id}/download/?path=manifest.json" in html
    assert 'id="pilot-review"' in html
    assert "No episodes accepted yet" not in html  # the chart has a bar now


def test_a_download_redirects_to_a_signed_link_and_is_recorded(pilot, customer):
    _, delivery = pilot
    response = logged_in(customer).get(
        f"/deliveries/{delivery.id}/download/", {"path": "meta/info.json"}
    )
    assert response.status_code == 302 and "X-Amz-Signature=" in response["Location"]
    with urllib.request.urlopen(response["Location"], timeout=10) as signed:
        assert b'"codebase_version": "v3.0"' in signed.read()
    event = DownloadEvent.objects.get()
    assert event.user == customer.user and event.path == "meta/info.json"


def test_other_customers_and_anonymous_visitors_get_nothing(pilot, other_customer):
    _, delivery = pilot
    assert logged_in(other_customer).get(f"/deliveries/{delivery.id}/download/").status_code == 404
    assert Client().get(f"/deliveries/{delivery.id}/download/").status_code == 302  # to login
    response = logged_in(other_customer).post(
        f"/deliveries/{delivery.id}/review/", {"decision": "approve"}
    )
    assert response.status_code == 404
    assert DownloadEvent.objects.count() == 0


def test_approving_the_pilot_by_page_releases_the_rest(
    pilot, customer, django_capture_on_commit_callbacks
):
    collection, delivery = pilot
    with django_capture_on_commit_callbacks(execute=True):
        response = logged_in(customer).post(
            f"/deliveries/{delivery.id}/review/", {"decision": "approve"}
        )
    assert response.status_code == 302 and response["Location"] == f"/orders/{collection.order.id}/"
    collection.order.refresh_from_db()
    assert collection.order.status == Order.Status.IN_COLLECTION


def test_rejecting_without_a_reason_shows_the_error(pilot, customer):
    _, delivery = pilot
    client = logged_in(customer)
    response = client.post(
        f"/deliveries/{delivery.id}/review/", {"decision": "reject"}, follow=True
    )
    assert "Say why the pilot is rejected." in response.content.decode()
    delivery.refresh_from_db()
    assert delivery.review == Delivery.Review.PENDING


def test_review_needs_csrf(pilot, customer):
    _, delivery = pilot
    client = Client(enforce_csrf_checks=True)
    client.force_login(customer.user)
    assert (
        client.post(f"/deliveries/{delivery.id}/review/", {"decision": "approve"}).status_code
        == 403
    )


def test_a_revoked_delivery_offers_no_links(pilot, customer):
    collection, delivery = pilot
    client = logged_in(customer)
    # the first POST only asks for confirmation (nothing revoked), the confirmed one revokes
    asked = client.post(f"/deliveries/{delivery.id}/revoke/")
    assert asked.status_code == 200 and b'id="confirm-page"' in asked.content
    delivery.refresh_from_db()
    assert delivery.revoked_at is None
    client.post(f"/deliveries/{delivery.id}/revoke/", {"confirmed": "yes"})
    response = client.get(f"/deliveries/{delivery.id}/download/", follow=True)
    assert "revoked" in response.content.decode()
    assert DownloadEvent.objects.count() == 0
    html = client.get(f"/orders/{collection.order.id}/").content.decode()
    assert "/download/?path=" not in html


def test_the_fleet_job_page_lists_episodes_with_qa_reasons(pilot, fleet_operator, other_customer):
    collection, _ = pilot
    html = logged_in(fleet_operator).get(f"/fleet/jobs/{collection.job.id}/").content.decode()
    assert 'id="episodes"' in html and "<code>non_finite</code>" in html and "passed" in html
