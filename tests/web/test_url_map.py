"""Every portal page, for every kind of visitor: 200 for the right user, 302 to the login page
for anonymous visitors, 404 for another organization's objects, 403 for the wrong kind of
organization. Guard tests keep this table in step with the URL map, and every page in portal/."""

from decimal import Decimal
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from marketplace.services import api_key_create
from orders import services
from orders.services import DatasetRequest
from tests.web.fleet_helpers import offered_job, operator_fleet

pytestmark = pytest.mark.django_db

PUBLIC = [
    "home",
    "catalog",
    "pricing",
    "signup",
    "login",
    "price-list",  # the rate card as a price list
    "operator-signup",
    "password_reset",
    "password_reset_done",
    "password_reset_complete",
    "download-client",  # the download command as one file
]
SIGNUP_PAGES = {"signup", "operator-signup"}  # signed-in visitors are sent on
# name -> which object its URL needs
CUSTOMER_PAGES = {
    "order-list-page": None,
    "order-new": None,
    "order-new-quote": "quote",
    "order-detail-page": "order",
    "order-live-page": "order",  # the order page's live parts (JSON)
    "order-episodes-page": "order",
    "order-exclusions-page": "order",  # exclude episodes or an operator (issue 16)
    "invoice-page": "order",  # billing: the order's invoice
    "invoice-pdf-page": "order",
}
OWNER_PAGES = {"api-keys": None}
POST_ONLY = {
    "order-cancel-page": "order",
    "api-key-revoke-page": "api_key",
    "order-pay-page": "order",  # billing: Pay with card (Checkout)
}
# The fleet portal (fleet operators): name -> which of the operator's objects its URL needs
FLEET_PAGES = {
    "fleet-overview-page": None,
    "fleet-new-page": None,
    "fleet-detail-page": "fleet",
    "fleet-edit-page": "fleet",
    "site-new-page": "fleet",
    "site-edit-page": "site",
    "robot-new-page": "fleet",
    "robot-edit-page": "robot",
    "site-collection-page": "site",  # objects and scenes (issue 30)
    "robot-calibrations-page": "robot",  # camera calibrations (issue 30)
    "offer-list-page": None,
    "job-list-page": None,
    "fleet-operators-page": None,  # the fleet's operators and their figures (issue 16)
    "job-detail-page": "job",
    "job-collect-page": "job",
    "fleet-earnings-page": None,  # billing: earnings and payouts
    "fleet-disputes-page": None,  # disputes over the fleet's delivered episodes (issue 28)
}
FLEET_POST_ONLY = {"offer-accept-page": "offer", "offer-decline-page": "offer"}
# logout is a POST action; probes and the Stripe webhook have their own tests; others not ours
# delivery pages need a delivery: tests/web/test_delivery_pages.py
NOT_PAGES = {
    "logout",
    "admin",
    "schema",
    "api-docs",
    "healthz",
    "readyz",
    "stripe-webhook",
    "delivery-download-page",
    "pilot-review-page",
    "delivery-revoke-page",
    "delivery-archive-page",
    "delivery-export-page",
    "api-redoc",
    # an accepted episode's page, poster and clip: tests/web/test_episode_media.py
    "episode-detail-page",
    "episode-poster",
    "episode-clip",
    # a link from the email: tests/web/test_portals.py
    "password_reset_confirm",
    # staff console (is_staff only): tests/web/test_portals.py
    "staff-attention",
    "staff-dispatch",
    "staff-redispatch",
    "staff-delivery-retry",
    "staff-flag-resolve",
    "staff-bank-transfer",
    "staff-order-exclusions-page",  # tests/web/test_exclusion_page.py
    # disputes (issue 28): tests/web/test_dispute_pages.py and the authorization matrix
    "fleet-dispute-page",
    "staff-disputes",
    "staff-dispute-page",
}


def _all_names(resolver=None, prefix=""):
    resolver = resolver or get_resolver()
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            route = prefix + str(entry.pattern)
            if route.startswith(("api/", "admin/")):
                continue
            yield from _all_names(entry, route)
        elif isinstance(entry, URLPattern) and entry.name:
            yield entry.name


def test_the_table_covers_every_portal_url():
    covered = set(PUBLIC) | set(CUSTOMER_PAGES) | set(OWNER_PAGES) | set(POST_ONLY) | NOT_PAGES
    covered |= set(FLEET_PAGES) | set(FLEET_POST_ONLY)
    assert set(_all_names()) - covered == set()


# Named URLs outside /api/ and /admin/ that are not pages, wired by marketplace/urls.py itself
NOT_PORTAL = {"healthz", "readyz", "stripe-webhook", "schema", "api-docs", "api-redoc"}


def test_every_web_page_is_served_by_the_portal():
    from portal import urls as portal_urls

    portal_names = {pattern.name for pattern in portal_urls.urlpatterns}
    assert set(_all_names()) - portal_names == NOT_PORTAL
    for pattern in portal_urls.urlpatterns:
        # the portal's own views, or Django's login and logout views
        module = pattern.callback.__module__
        assert module.startswith(("portal.views.", "django.contrib.auth.")), pattern.name


@pytest.fixture
def objects(customer):
    quote = services.quote_create(
        organization=customer.organization,
        request=DatasetRequest(task_type="bin-picking", embodiment="ur5e", hours=Decimal("10")),
    )
    order = services.order_create(
        caller=_caller(customer),
        request=DatasetRequest(task_type="bin-picking", embodiment="ur5e", hours=Decimal("10")),
        details=services.OrderDetails(),
    )
    key = api_key_create(organization=customer.organization, name="ci").api_key
    return {"quote": quote.pk, "order": order.pk, "api_key": key.pk}


def _caller(tenant):
    from marketplace.tenancy import Caller

    return Caller(organization=tenant.organization, role="owner", user=tenant.user)


def _url(name, needs, objects):
    if needs is None:
        return reverse(name)
    kwarg = "quote_id" if needs == "quote" else "pk"
    return reverse(name, kwargs={kwarg: objects[needs]})


@pytest.mark.parametrize("name", PUBLIC)
def test_public_pages_open_to_everyone(name, client, customer_client):
    assert client.get(reverse(name)).status_code == 200
    response = customer_client.get(reverse(name))
    # signed-in visitors are sent on from the sign-up page; the rest render
    assert response.status_code == (302 if name in SIGNUP_PAGES else 200)


@pytest.mark.parametrize(("name", "needs"), [*CUSTOMER_PAGES.items(), *OWNER_PAGES.items()])
def test_anonymous_visitors_are_sent_to_login(name, needs, objects, client):
    url = _url(name, needs, objects)
    response = client.get(url)
    assert response.status_code == 302
    target = urlsplit(response.url)
    assert target.path == reverse("login")
    assert url in response.url  # ?next=... brings them back


@pytest.mark.parametrize(("name", "needs"), [*CUSTOMER_PAGES.items(), *OWNER_PAGES.items()])
def test_pages_open_for_their_owner(name, needs, objects, customer_client):
    assert customer_client.get(_url(name, needs, objects)).status_code == 200


@pytest.mark.parametrize(
    ("name", "needs"), [(n, o) for n, o in CUSTOMER_PAGES.items() if o is not None]
)
def test_another_organizations_objects_do_not_exist(name, needs, objects, other_client):
    assert other_client.get(_url(name, needs, objects)).status_code == 404


@pytest.mark.parametrize(("name", "needs"), list(POST_ONLY.items()))
def test_actions_on_another_organizations_objects_are_404(name, needs, objects, other_client):
    assert other_client.post(_url(name, needs, objects)).status_code == 404


@pytest.mark.parametrize(("name", "needs"), list(POST_ONLY.items()))
def test_actions_are_post_only_and_need_login(name, needs, objects, client, customer_client):
    url = _url(name, needs, objects)
    assert customer_client.get(url).status_code == 405
    response = client.post(url)
    assert response.status_code == 302
    assert urlsplit(response.url).path == reverse("login")


@pytest.mark.parametrize(("name", "needs"), list(CUSTOMER_PAGES.items()))
def test_fleet_operators_are_refused_customer_pages(name, needs, objects, fleet_client):
    response = fleet_client.get(_url(name, needs, objects))
    assert response.status_code == 403
    assert b"for customer organizations" in response.content


def test_api_keys_page_is_for_owners_only(member_client):
    response = member_client.get(reverse("api-keys"))
    assert response.status_code == 403


def test_billing_members_read_orders_but_cannot_order(billing_tenant):
    client = Client()
    client.force_login(billing_tenant.user)
    assert client.get(reverse("order-list-page")).status_code == 200
    assert client.get(reverse("order-new")).status_code == 403


def test_unknown_pages_get_the_designed_404(client):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert b"Page not found" in response.content


# --- The fleet portal --------------------------------------------------------------------------


@pytest.fixture
def fleet_objects(fleet_operator):
    fleet, site, robot = operator_fleet(fleet_operator.organization)
    job, offer = offered_job(site)
    return {"fleet": fleet.pk, "site": site.pk, "robot": robot.pk, "job": job.pk, "offer": offer.pk}


@pytest.fixture
def other_operator_client(make_tenant):
    from marketplace.models import Organization

    client = Client()
    client.force_login(make_tenant(Organization.Kind.FLEET_OPERATOR).user)
    return client


def _fleet_url(name, needs, objects):
    return reverse(name) if needs is None else reverse(name, kwargs={"pk": objects[needs]})


@pytest.mark.parametrize(("name", "needs"), list(FLEET_PAGES.items()))
def test_fleet_pages_open_for_their_operator(name, needs, fleet_objects, fleet_client):
    response = fleet_client.get(_fleet_url(name, needs, fleet_objects))
    assert response.status_code == 200


@pytest.mark.parametrize(("name", "needs"), list(FLEET_PAGES.items()))
def test_fleet_pages_send_anonymous_visitors_to_login(name, needs, fleet_objects, client):
    url = _fleet_url(name, needs, fleet_objects)
    response = client.get(url)
    assert response.status_code == 302
    assert urlsplit(response.url).path == reverse("login")
    assert url in response.url


@pytest.mark.parametrize(
    ("name", "needs"), [(n, o) for n, o in FLEET_PAGES.items() if o is not None]
)
def test_another_operators_fleet_objects_do_not_exist(
    name, needs, fleet_objects, other_operator_client
):
    assert other_operator_client.get(_fleet_url(name, needs, fleet_objects)).status_code == 404


@pytest.mark.parametrize(("name", "needs"), list(FLEET_POST_ONLY.items()))
def test_offer_actions_on_another_operators_offer_are_404(
    name, needs, fleet_objects, other_operator_client
):
    url = _fleet_url(name, needs, fleet_objects)
    assert other_operator_client.post(url).status_code == 404
    from fleets.models import Offer

    assert Offer.objects.get(pk=fleet_objects["offer"]).status == Offer.Status.PENDING


@pytest.mark.parametrize(("name", "needs"), list(FLEET_POST_ONLY.items()))
def test_offer_actions_are_post_only_and_need_login(
    name, needs, fleet_objects, client, fleet_client
):
    url = _fleet_url(name, needs, fleet_objects)
    assert fleet_client.get(url).status_code == 405
    response = client.post(url)
    assert response.status_code == 302
    assert urlsplit(response.url).path == reverse("login")


@pytest.mark.parametrize(("name", "needs"), [*FLEET_PAGES.items(), *FLEET_POST_ONLY.items()])
def test_customers_are_refused_fleet_pages(name, needs, fleet_objects, customer_client):
    url = _fleet_url(name, needs, fleet_objects)
    method = customer_client.post if name in FLEET_POST_ONLY else customer_client.get
    response = method(url)
    assert response.status_code == 403
    assert b"for fleet operator organizations" in response.content
