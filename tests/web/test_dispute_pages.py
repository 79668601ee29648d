"""The dispute pages (issue 28): the fleet's list and answer form (owners and members answer,
the billing role reads), the staff's queue and decision page (the download audit, the
customer's share, the fleet's answer; grant, partial or refuse with a note), and the
customer's page showing the fleet's answer and the decision."""

import pytest
from django.test import Client

from datasets.models import ClaimEvent, Dispute, EpisodeExclusion
from marketplace.models import Membership, Organization, User
from tests.factories import MembershipFactory, UserFactory
from tests.web.dispute_helpers import disputed_order

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager_celery")]


@pytest.fixture
def disputed(customer, fleet_operator):
    return disputed_order(customer.organization, fleet_operator.organization)


@pytest.fixture
def staff():
    client = Client()
    client.force_login(User.objects.create_user(username="judge", password="x", is_staff=True))
    return client


def _fleet_user(fleet_operator, role) -> Client:
    user = UserFactory()
    MembershipFactory(user=user, organization=fleet_operator.organization, role=role)
    client = Client()
    client.force_login(user)
    return client


def test_the_fleet_reads_and_answers_its_dispute_once(disputed, fleet_operator, make_tenant):
    url = f"/fleet/disputes/{disputed.dispute.id}/"
    owner = fleet_operator.session_client()
    listed = owner.get("/fleet/disputes/").content.decode()
    assert f'data-dispute="{disputed.dispute.id}" data-status="open"' in listed
    page = owner.get(url).content.decode()
    assert 'id="dispute-answer-form"' in page and page.count("data-episode=") == 4
    assert "none of these is the task" in page
    # the billing role reads, without the form, and cannot answer by a forged POST
    billing = _fleet_user(fleet_operator, Membership.Role.BILLING)
    assert 'id="dispute-answer-form"' not in billing.get(url).content.decode()
    refused = billing.post(url, {"answer": "sneaky"}, follow=True).content.decode()
    assert "may not answer" in refused
    # another fleet operator sees nothing of it; customers are refused fleet pages
    stranger = make_tenant(Organization.Kind.FLEET_OPERATOR).session_client()
    assert stranger.get(url).status_code == 404
    assert stranger.post(url, {"answer": "x"}).status_code == 404
    # when
    owner.post(url, {"answer": "Each shows the peg going in; see 0-12 s."})
    # then
    dispute = Dispute.objects.get(pk=disputed.dispute.pk)
    assert dispute.status == Dispute.Status.AWAITING_DECISION
    assert dispute.answer == "Each shows the peg going in; see 0-12 s."
    again = owner.post(url, {"answer": "more"}, follow=True).content.decode()
    assert "answered already" in again
    shown = owner.get(url).content.decode()
    assert 'id="fleet-answer"' in shown and 'id="dispute-answer-form"' not in shown


def test_staff_see_the_download_audit_and_decide_a_partial_grant(
    disputed, customer, fleet_operator, staff, django_capture_on_commit_callbacks
):
    queue = staff.get("/staff/disputes/").content.decode()
    assert f'data-dispute="{disputed.dispute.id}"' in queue
    url = f"/staff/disputes/{disputed.dispute.id}/"
    page = staff.get(url).content.decode()
    assert "3 / 3 (100%)" in page and "api_key:grabber" in page
    assert '<strong id="customer-share">0%</strong>' in page and 'id="dispute-decide"' not in page
    # the fleet answers; now staff decide
    fleet_operator.session_client().post(
        f"/fleet/disputes/{disputed.dispute.id}/", {"answer": "two of them are fine"}
    )
    page = staff.get(url).content.decode()
    assert "two of them are fine" in page and 'id="dispute-decide"' in page
    granted = [str(e.id) for e in disputed.episodes[:2]]
    # a decision without a note is refused and changes nothing
    bare = staff.post(url, {"decision": "partial", "episodes": granted}, follow=True)
    assert "every decision is explained" in bare.content.decode()
    assert Dispute.objects.get(pk=disputed.dispute.pk).status == "awaiting_decision"
    # when
    with django_capture_on_commit_callbacks(execute=True):
        staff.post(url, {"decision": "partial", "episodes": granted, "note": "two are cups"})
    # then
    excluded = EpisodeExclusion.objects.values_list("episode_id", flat=True)
    assert sorted(str(e) for e in excluded) == sorted(granted)
    dispute = Dispute.objects.get(pk=disputed.dispute.pk)
    assert (dispute.decision, dispute.decided_by) == ("partial", "staff:judge")
    (event,) = ClaimEvent.objects.filter(action="decided")
    assert sorted(event.data["granted"]) == sorted(granted) and event.note == "two are cups"
    # the customer's page shows the fleet's answer and the decision; the fleet's too
    mine = customer.session_client().get(f"/orders/{disputed.order.id}/exclusions/")
    shown = mine.content.decode()
    assert "two of them are fine" in shown and 'class="dispute-decision">partly granted<' in shown
    theirs = fleet_operator.session_client().get(f"/fleet/disputes/{dispute.id}/").content
    assert b"partly granted" in theirs
    # the customer's granted share across its orders: 24 s of the 48 s delivered
    assert '<strong id="customer-share">50%</strong>' in staff.get(url).content.decode()
    decided = staff.get("/staff/disputes/").content.decode()
    assert decided.index(str(dispute.id)) > decided.index('id="disputes-decided"')


def test_staff_cannot_decide_before_the_fleets_deadline_and_customers_cannot_open_it(
    disputed, customer, fleet_operator, staff
):
    url = f"/staff/disputes/{disputed.dispute.id}/"
    early = staff.post(url, {"decision": "granted", "note": "fast"}, follow=True)
    assert "The fleet may answer until" in early.content.decode()
    assert not EpisodeExclusion.objects.exists()
    assert customer.session_client().get(url).status_code == 403
    assert fleet_operator.session_client().post(url, {"decision": "granted"}).status_code == 403
    assert not EpisodeExclusion.objects.exists()
