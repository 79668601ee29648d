"""The portal's forms through Django's test client: sign up, the order wizard, cancelling,
API keys. Errors are shown next to their fields; every POST needs its CSRF token."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from marketplace.models import ApiKey, Membership, Organization, User
from orders import services
from orders.models import Order, OrderEvent, Quote
from orders.money import format_money
from orders.services import DatasetRequest
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def field_error(html: str, field: str) -> str:
    """The text in the error slot right after a field (empty when the field is fine)."""
    match = re.search(rf'<div class="field-error" id="id_{field}_error">(.*?)</div>', html, re.S)
    assert match, f"no error slot for {field}"
    return re.sub(r"<[^>]+>", " ", match.group(1)).strip()


SPEC = {
    "task_type": "peg-insertion",
    "complexity": "",
    "embodiment": "franka-fr3",
    "hours": "20",
    "environments": "4",
    "objects_per_environment": "3",
    "sensors": ["wrist-camera", "force-torque"],
}


# --- Sign up -----------------------------------------------------------------------------------

SIGNUP = {
    "organization_name": "Grasp Lab",
    "username": "ada",
    "email": "ada@example.com",
    "password1": "a-long-unusual-passphrase-7",
    "password2": "a-long-unusual-passphrase-7",
}


def test_signup_creates_a_customer_organization_owned_by_the_new_user(client):
    # when
    response = client.post(reverse("signup"), SIGNUP)
    # then
    assert response.status_code == 302
    assert response.url == reverse("order-list-page")
    user = User.objects.get(username="ada")
    membership = Membership.objects.get(user=user)
    assert membership.role == Membership.Role.OWNER
    assert membership.organization.kind == Organization.Kind.CUSTOMER
    assert membership.organization.name == "Grasp Lab"
    assert client.get(reverse("order-list-page")).status_code == 200  # logged in


def test_signup_returns_to_a_local_next_page_only(client):
    next_url = reverse("order-new") + "?task_type=bin-picking&hours=12"
    response = client.post(reverse("signup") + "?next=x", {**SIGNUP, "next": next_url})
    assert response.url == next_url
    client.logout()
    other = {**SIGNUP, "username": "bob", "email": "bob@example.com", "next": "https://evil.test/"}
    assert client.post(reverse("signup"), other).url == reverse("order-list-page")


def test_signup_errors_are_shown_next_to_their_fields(client):
    UserFactory(username="taken", email="taken@example.com")
    # when
    response = client.post(
        reverse("signup"),
        {**SIGNUP, "username": "taken", "email": "taken@example.com", "password2": "other"},
    )
    html = response.content.decode()
    # then
    assert response.status_code == 200
    assert "The two passwords differ." in field_error(html, "password2")
    assert 'aria-invalid="true"' in html
    assert field_error(html, "organization_name") == ""


def test_signup_refuses_taken_names_next_to_the_fields(client):
    UserFactory(username="taken", email="taken@example.com")
    response = client.post(
        reverse("signup"), {**SIGNUP, "username": "taken", "email": "TAKEN@example.com"}
    )
    html = response.content.decode()
    assert "This username is taken." in field_error(html, "username")
    assert "already exists" in field_error(html, "email")
    assert not Organization.objects.filter(name="Grasp Lab").exists()


def test_signup_refuses_weak_passwords(client):
    response = client.post(
        reverse("signup"), {**SIGNUP, "password1": "12345", "password2": "12345"}
    )
    assert "too short" in field_error(response.content.decode(), "password1")
    assert not User.objects.filter(username="ada").exists()


def test_signup_needs_the_csrf_token():
    client = Client(enforce_csrf_checks=True)
    response = client.post(reverse("signup"), SIGNUP)
    assert response.status_code == 403
    assert not User.objects.filter(username="ada").exists()


def test_login_page_logs_in_and_shows_errors(client, customer):
    response = client.post(reverse("login"), {"username": customer.user.username, "password": "x"})
    assert response.status_code == 200
    assert "correct username and password" in response.content.decode()
    response = client.post(
        reverse("login"), {"username": customer.user.username, "password": "pw-for-tests-123"}
    )
    assert response.status_code == 302


# --- Order wizard ------------------------------------------------------------------------------


def test_wizard_prices_a_quote_then_places_the_order_from_it(customer, customer_client):
    # given: step 1, the specification
    response = customer_client.post(reverse("order-new"), SPEC)
    assert response.status_code == 302
    quote = Quote.objects.get(organization=customer.organization)
    assert response.url == reverse("order-new-quote", kwargs={"quote_id": quote.pk})
    # when: step 2 shows the price, then the order is placed
    page = customer_client.get(response.url).content.decode()
    assert format_money(quote.total, "USD") in page  # the one money format
    for line in quote.lines:
        assert line["description"] in page
    response = customer_client.post(response.url, {"output_format": "lerobot_v3", "notes": "hi"})
    # then
    order = Order.objects.get(organization=customer.organization)
    assert response.url == reverse("order-detail-page", kwargs={"pk": order.pk})
    assert order.quote == quote
    assert order.total == quote.total
    assert order.status == Order.Status.AWAITING_PAYMENT
    assert order.created_by == customer.user
    page = customer_client.get(response.url).content.decode()
    assert "Payment pending" in page
    assert 'id="timeline"' in page
    assert "Awaiting payment" in page


def test_wizard_step_one_is_prefilled_from_the_calculator_link(customer_client):
    response = customer_client.get(
        reverse("order-new"),
        {"task_type": "bin-picking", "embodiment": "ur5e", "hours": "42", "sensors": "tactile"},
    )
    html = response.content.decode()
    assert 'value="42"' in html
    assert re.search(r'<option value="bin-picking"[^>]*selected', html)
    assert re.search(r'value="tactile"[^>]*checked', html)


def test_wizard_shows_form_errors_next_to_fields(customer_client):
    response = customer_client.post(
        reverse("order-new"), {**SPEC, "hours": "0", "environments": ""}
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "greater than or equal to 0.01" in field_error(html, "hours")
    assert "required" in field_error(html, "environments")
    assert field_error(html, "embodiment") == ""
    assert not Quote.objects.exists()


def test_wizard_shows_the_pricing_services_refusals_next_to_fields(customer_client):
    # 3 hours cannot be spread over 40 environments: the service says so, about `environments`
    response = customer_client.post(
        reverse("order-new"), {**SPEC, "hours": "3", "environments": "40"}
    )
    assert "at least 0.5 h" in field_error(response.content.decode(), "environments")


def test_wizard_shows_order_detail_refusals_next_to_fields(customer, customer_client):
    customer_client.post(reverse("order-new"), SPEC)
    quote = Quote.objects.get()
    url = reverse("order-new-quote", kwargs={"quote_id": quote.pk})
    too_soon = (timezone.localdate() + timedelta(days=1)).isoformat()
    # when
    response = customer_client.post(
        url, {"output_format": "lerobot_v3", "deadline": too_soon, "pilot_hours": "50"}
    )
    html = response.content.decode()
    # then: the first service refusal is shown at its field, nothing is ordered
    assert "Pilot hours must be" in field_error(html, "pilot_hours") or (
        "earliest possible deadline" in field_error(html, "deadline")
    )
    assert not Order.objects.exists()


def test_an_expired_quote_cannot_be_ordered(customer_client):
    customer_client.post(reverse("order-new"), SPEC)
    quote = Quote.objects.get()
    Quote.objects.filter(pk=quote.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    url = reverse("order-new-quote", kwargs={"quote_id": quote.pk})
    assert "This quote expired" in customer_client.get(url).content.decode()
    response = customer_client.post(url, {"output_format": "lerobot_v3"})
    assert "expired" in response.content.decode()
    assert not Order.objects.exists()


def test_a_used_quote_leads_to_its_order(customer_client):
    customer_client.post(reverse("order-new"), SPEC)
    url = reverse("order-new-quote", kwargs={"quote_id": Quote.objects.get().pk})
    customer_client.post(url, {"output_format": "lerobot_v3"})
    response = customer_client.get(url)
    assert response.url == reverse("order-detail-page", kwargs={"pk": Order.objects.get().pk})


def test_wizard_needs_the_csrf_token(customer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(customer.user)
    assert client.post(reverse("order-new"), SPEC).status_code == 403
    assert not Quote.objects.exists()


# --- Order list and page -----------------------------------------------------------------------


def _order(tenant, hours="10", environments=2):
    from marketplace.tenancy import Caller

    return services.order_create(
        caller=Caller(organization=tenant.organization, role="owner", user=tenant.user),
        request=DatasetRequest(
            task_type="bin-picking",
            embodiment="ur5e",
            hours=Decimal(hours),
            environments=environments,
        ),
        details=services.OrderDetails(),
    )


def test_order_list_shows_only_the_organizations_orders(customer, other_customer, customer_client):
    mine, theirs = _order(customer), _order(other_customer)
    html = customer_client.get(reverse("order-list-page")).content.decode()
    assert str(mine.pk)[:8] in html
    assert str(theirs.pk)[:8] not in html


def test_order_list_has_a_designed_empty_state(customer_client):
    html = customer_client.get(reverse("order-list-page")).content.decode()
    assert "No orders yet." in html
    assert reverse("order-new") in html


def test_order_list_filters_by_status(customer, customer_client):
    order = _order(customer)
    html = customer_client.get(reverse("order-list-page"), {"status": "paid"}).content.decode()
    assert str(order.pk)[:8] not in html
    assert "No orders with this status." in html


def test_order_page_shows_progress_timeline_and_coverage_placeholder(customer, customer_client):
    order = _order(customer, hours="10", environments=3)
    Order.objects.filter(pk=order.pk).update(accepted_hours=Decimal("2.5"))
    html = customer_client.get(
        reverse("order-detail-page", kwargs={"pk": order.pk})
    ).content.decode()
    assert 'aria-valuenow="25"' in html  # 2.5 of 10 accepted hours
    assert "2.50</strong> of 10 hours accepted (25%)" in html
    assert html.count("<rect ") == 3  # one bar per environment
    assert "No episodes accepted yet" in html
    assert 'id="deliveries-empty"' in html
    assert html.index("Awaiting payment") < html.index("Order created.")  # newest first


def test_cancel_goes_through_the_service_and_is_recorded(customer, customer_client):
    order = _order(customer)
    url = reverse("order-cancel-page", kwargs={"pk": order.pk})
    # when
    response = customer_client.post(url, {"reason": "Budget moved"})
    # then
    assert response.status_code == 302
    order.refresh_from_db()
    assert order.status == Order.Status.CANCELLED
    event = OrderEvent.objects.filter(order=order).last()
    assert event.reason == "Budget moved"
    assert event.actor == customer.user
    html = customer_client.get(response.url).content.decode()
    assert "The order is cancelled." in html
    assert "Cancel order</button>" not in html  # no longer offered


def test_cancel_refusals_are_shown_as_messages(customer, customer_client):
    order = _order(customer)
    Order.objects.filter(pk=order.pk).update(status=Order.Status.DELIVERED)
    response = customer_client.post(
        reverse("order-cancel-page", kwargs={"pk": order.pk}), follow=True
    )
    assert "cannot be cancelled" in response.content.decode()


def test_cancel_needs_the_csrf_token(customer):
    order = _order(customer)
    client = Client(enforce_csrf_checks=True)
    client.force_login(customer.user)
    response = client.post(reverse("order-cancel-page", kwargs={"pk": order.pk}))
    assert response.status_code == 403
    order.refresh_from_db()
    assert order.status == Order.Status.AWAITING_PAYMENT


def test_billing_members_cannot_cancel(customer, make_tenant):
    billing = make_tenant(Organization.Kind.CUSTOMER, Membership.Role.BILLING)
    order = _order(billing)
    client = Client()
    client.force_login(billing.user)
    assert (
        "Cancel order</button>"
        not in client.get(reverse("order-detail-page", kwargs={"pk": order.pk})).content.decode()
    )
    assert client.post(reverse("order-cancel-page", kwargs={"pk": order.pk})).status_code == 403


# --- API keys ----------------------------------------------------------------------------------


def test_api_key_is_shown_once_then_listed_by_prefix(customer, customer_client):
    # when
    response = customer_client.post(reverse("api-keys"), {"name": "pipeline", "role": "member"})
    # then
    assert response.status_code == 302
    key = ApiKey.objects.get(organization=customer.organization, name="pipeline")
    html = customer_client.get(reverse("api-keys")).content.decode()
    raw = re.search(r'id="new-key-value"[^>]*value="(mk_[^"]+)"', html).group(1)
    assert raw.startswith(f"mk_{key.prefix}_")
    again = customer_client.get(reverse("api-keys")).content.decode()
    assert raw not in again
    assert f"mk_{key.prefix}_" in again
    # and the key works on the API
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    assert api.get("/api/v1/me").status_code == 200


def test_api_key_form_errors_are_next_to_fields(customer_client):
    response = customer_client.post(reverse("api-keys"), {"name": "", "role": "root"})
    html = response.content.decode()
    assert "required" in field_error(html, "name")
    assert "valid choice" in field_error(html, "role")


def test_api_key_revoke(customer, customer_client):
    key = customer.api_key
    # the first POST asks for confirmation (the key still works), the confirmed one revokes
    asked = customer_client.post(reverse("api-key-revoke-page", kwargs={"pk": key.pk}))
    assert asked.status_code == 200 and b'id="confirm-page"' in asked.content
    key.refresh_from_db()
    assert key.revoked_at is None
    response = customer_client.post(
        reverse("api-key-revoke-page", kwargs={"pk": key.pk}), {"confirmed": "yes"}
    )
    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    html = customer_client.get(reverse("api-keys")).content.decode()
    assert "is revoked" in html
    # revoking twice is explained, not a crash
    again = customer_client.post(
        reverse("api-key-revoke-page", kwargs={"pk": key.pk}), {"confirmed": "yes"}, follow=True
    )
    assert "already revoked" in again.content.decode()


def test_api_key_pages_need_the_csrf_token(customer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(customer.user)
    assert client.post(reverse("api-keys"), {"name": "x", "role": "member"}).status_code == 403
    revoke = reverse("api-key-revoke-page", kwargs={"pk": customer.api_key.pk})
    assert client.post(revoke).status_code == 403


def test_order_list_queries_do_not_grow_with_the_orders(
    customer, customer_client, django_assert_max_num_queries
):
    _order(customer)
    with django_assert_max_num_queries(12) as one:
        customer_client.get(reverse("order-list-page"))
    for _ in range(5):
        _order(customer)
    with django_assert_max_num_queries(len(one.captured_queries)):
        customer_client.get(reverse("order-list-page"))


# --- Public pages ------------------------------------------------------------------------------


def test_catalog_explains_the_rubric_with_multipliers(client):
    html = client.get(reverse("catalog")).content.decode()
    assert "The complexity rubric" in html
    assert "L4 Contact-rich" in html
    assert "\u00d7 2.2" in html  # the in-force rate card's L4 multiplier
    assert "Peg-in-hole insertion" in html


def test_price_calculator_is_wired_to_the_price_preview_api(client):
    html = client.get(reverse("pricing")).content.decode()
    assert 'data-quote-url="/api/v1/quotes/preview"' in html
    assert '<meta name="csrf-token" content="' in html
    assert 'id="quote-panel"' in html and "Enter a specification to see its price." in html
    assert (
        'name="csrfmiddlewaretoken"' not in html.split('id="dataset-form"')[1].split("</form>")[0]
    )


def test_public_pages_say_when_no_rate_card_is_in_force(client):
    from orders.models import RateCard

    RateCard.objects.all().delete()
    for name in ("catalog", "pricing"):
        assert "No rate card is in force" in client.get(reverse(name)).content.decode()
