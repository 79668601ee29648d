"""Offers obey the bid rules (issue 28, item 4): whatever path makes an offer or an assignment,
the fleet is paid in the order's currency, at most the order's price per hour; a re-collection
pays the fleet that collected the episodes its original agreed rate and others at most that;
the database refuses anything else; fleets' rates and currencies are validated."""

from datetime import timedelta
from decimal import Decimal

import numpy as np
import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from fleets.models import Assignment, Fleet, Job, Offer
from fleets.services.dispatch import (
    bid_place,
    job_dispatch,
    offer_accept,
    offer_decline,
    open_jobs_dispatch,
)
from fleets.services.jobs import job_redispatch
from fleets.services.pay_terms import PayTerms, offered_rate
from fleets.services.planning import job_recollect
from fleets.services.sweep import dispatch_sweep
from marketplace.errors import ServiceError
from orders.models import Order
from tests.factories import FleetFactory, OrderFactory, equipped_site

pytestmark = pytest.mark.django_db


def fleet(rate: str, currency: str = "USD", quality: str = "0.800", organization=None) -> Fleet:
    extra = {"organization": organization} if organization is not None else {}
    return equipped_site(
        payout_rate_per_hour=Decimal(rate),
        currency=currency,
        quality_score=Decimal(quality),
        **extra,
    ).fleet


def open_job(customer, *, price_per_hour: str = "406", status=Job.Status.OPEN) -> Job:
    """A 1 h job of a USD order the customer pays `price_per_hour` per hour for."""
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.IN_COLLECTION,
        hours=Decimal("2"),
        total=Decimal(price_per_hour) * 2,
    )
    return Job.objects.create(
        order=order,
        sequence=1,
        environment_index=0,
        embodiment=order.embodiment,
        end_effector="parallel_gripper",
        target_hours=Decimal("1"),
        deadline=timezone.now() + timedelta(days=10),
        status=status,
    )


def dispatch_by(path: str, job: Job, capture) -> None:
    """Dispatch `job` the way `path` does (Celery runs eagerly in these tests)."""
    with capture(execute=True):
        if path == "batch":
            open_jobs_dispatch()
        elif path == "one":
            job_dispatch(job_id=job.pk)
        elif path == "sweeper":
            Job.objects.filter(pk=job.pk).update(updated_at=timezone.now() - timedelta(hours=1))
            dispatch_sweep()
        elif path == "staff":
            Job.objects.filter(pk=job.pk).update(status=Job.Status.FLAGGED)
            job_redispatch(job_id=job.pk, actor_label="staff:test")


PATHS = ["batch", "one", "sweeper", "staff"]


@pytest.mark.parametrize("path", PATHS)
def test_every_dispatch_path_offers_only_in_the_order_currency_and_within_its_price(
    customer, django_capture_on_commit_callbacks, path
):
    # given: a USD order priced 406/h; the best-scored fleets are paid in EUR (0.5/h, which a
    # plain number comparison finds cheapest) and in USD above the price (5,000/h)
    job = open_job(customer, price_per_hour="406")
    fleet("0.5", currency="EUR", quality="1.000")
    fleet("5000", quality="1.000")
    within = fleet("60", quality="0.300")
    # when
    dispatch_by(path, job, django_capture_on_commit_callbacks)
    # then: offered to the only fleet the rule allows, at its own rate, in USD
    (offer,) = Offer.objects.filter(job=job)
    assert (offer.fleet_id, offer.rate_per_hour, offer.currency) == (
        within.pk,
        Decimal("60"),
        "USD",
    )


@pytest.mark.parametrize("path", PATHS)
def test_no_path_offers_a_job_when_only_other_currencies_or_higher_rates_remain(
    customer, django_capture_on_commit_callbacks, path
):
    # given: only a XAU fleet (a row from before currencies were checked) and one above price
    job = open_job(customer, price_per_hour="406")
    fleet("0.5", currency="XAU")
    fleet("406.0001")
    # when
    dispatch_by(path, job, django_capture_on_commit_callbacks)
    # then: nobody is offered it; the job waits for staff
    assert not Offer.objects.filter(job=job).exists()
    job.refresh_from_db()
    assert job.status == Job.Status.FLAGGED


def test_a_fleet_at_exactly_the_price_is_offered_it(customer, django_capture_on_commit_callbacks):
    job = open_job(customer, price_per_hour="406")
    at_price = fleet("406")
    dispatch_by("one", job, django_capture_on_commit_callbacks)
    offer = Offer.objects.get(job=job)
    assert (offer.fleet_id, offer.rate_per_hour) == (at_price.pk, Decimal("406"))


def test_an_offer_is_not_accepted_once_the_fleet_is_paid_in_another_currency(
    customer, fleet_operator, django_capture_on_commit_callbacks
):
    # given: a USD offer to the operator's fleet
    job = open_job(customer)
    mine = fleet("60", organization=fleet_operator.organization)
    dispatch_by("one", job, django_capture_on_commit_callbacks)
    offer = Offer.objects.get(job=job, fleet=mine)
    # when: the fleet switches to EUR, then accepts
    changed = fleet_operator.client.patch(
        f"/api/v1/fleet/fleets/{mine.pk}", {"currency": "EUR"}, format="json"
    )
    assert changed.status_code == 200
    response = fleet_operator.client.post(f"/api/v1/fleet/offers/{offer.pk}/accept")
    # then: refused in the error shape, nothing assigned
    assert response.status_code == 400
    assert response.json()["code"] == "pay_currency"
    assert not Assignment.objects.filter(job=job).exists()


def test_the_database_refuses_offers_and_assignments_that_break_the_rule(customer):
    # given: a job of an order priced 406 USD/h, fleets in EUR and USD
    job = open_job(customer, price_per_hour="406")
    euro = fleet("0.5", currency="EUR")
    dollar = fleet("60")
    site = dollar.sites.get()
    expires = timezone.now() + timedelta(hours=1)
    bad_rows = [
        lambda: Offer.objects.create(
            job=job, fleet=euro, site=euro.sites.get(), score=1, rate_per_hour=Decimal("0.5"),
            currency="EUR", expires_at=expires,
        ),
        lambda: Offer.objects.create(
            job=job, fleet=dollar, site=site, score=1, rate_per_hour=Decimal("406.0001"),
            currency="USD", expires_at=expires,
        ),
        lambda: Offer.objects.bulk_create([
            Offer(job=job, fleet=dollar, site=site, score=1, rate_per_hour=Decimal("5000"),
                  currency="USD", expires_at=expires),
        ]),
        lambda: Assignment.objects.create(
            job=job, fleet=dollar, site=site, rate_per_hour=Decimal("5000"), currency="USD"
        ),
        lambda: Assignment.objects.create(
            job=job, fleet=dollar, site=site, rate_per_hour=Decimal("50"), currency="XAU"
        ),
    ]  # fmt: skip
    # when / then: every write is refused by the database itself
    for write in bad_rows:
        with pytest.raises(IntegrityError, match="pay rule"), transaction.atomic():
            write()
    # and a row within the rule is written; changing its rate past the rule is refused
    good = Assignment.objects.create(
        job=job, fleet=dollar, site=site, rate_per_hour=Decimal("406"), currency="USD"
    )
    with pytest.raises(IntegrityError, match="pay rule"), transaction.atomic():
        Assignment.objects.filter(pk=good.pk).update(rate_per_hour=Decimal("407"))
    Assignment.objects.filter(pk=good.pk).update(active=False)  # other columns: no check


def completed_by(job: Job, taker: Fleet, capture, rate: str) -> Assignment:
    """The job dispatched, offered to `taker` at `rate` and accepted, then collected."""
    dispatch_by("one", job, capture)
    offer = Offer.objects.get(job=job, status=Offer.Status.PENDING)
    assert (offer.fleet_id, offer.rate_per_hour) == (taker.pk, Decimal(rate))
    assignment = offer_accept(organization=taker.organization, offer_id=offer.pk)
    Job.objects.filter(pk=job.pk).update(
        status=Job.Status.COMPLETED, accepted_seconds=Decimal("3600")
    )
    return assignment


def test_recollection_is_offered_at_the_original_rate_after_the_fleet_raised_it(
    customer, make_tenant, django_capture_on_commit_callbacks
):
    # given: fleet F won the job at 50/h (order priced 100/h) and collected it
    operator = make_tenant("fleet_operator")
    original = fleet("50", organization=operator.organization, quality="0.500")
    job = open_job(customer, price_per_hour="100")
    completed_by(job, original, django_capture_on_commit_callbacks, rate="50")
    # F then raises its rate through the API; two other fleets appear: G asks 60/h (within the
    # order's price, above F's agreed rate), H asks 40/h
    raised = operator.client.patch(
        f"/api/v1/fleet/fleets/{original.pk}", {"payout_rate_per_hour": "5000"}, format="json"
    )
    assert raised.status_code == 200, raised.json()
    dearer = fleet("60", quality="1.000")
    cheaper = fleet("40", quality="0.300")
    # when: 1,800 s of its episodes are excluded and collected again
    with django_capture_on_commit_callbacks(execute=True):
        extra = job_recollect(
            job_id=job.pk, seconds=Decimal("1800"), actor_label="staff:test", reason="test"
        )
    # then: the re-collection is offered to F at its original 50/h, not its 5,000/h now
    offer = Offer.objects.get(job=extra, status=Offer.Status.PENDING)
    assert (offer.fleet_id, offer.rate_per_hour, offer.currency) == (
        original.pk,
        Decimal("50"),
        "USD",
    )
    # when F declines, the next fleet is offered at most F's agreed rate: H at its 40/h (G,
    # asking 60/h, is not offered it though the order's price would allow it)
    with django_capture_on_commit_callbacks(execute=True):
        offer_decline(organization=operator.organization, offer_id=offer.pk)
    offer = Offer.objects.get(job=extra, status=Offer.Status.PENDING)
    assert (offer.fleet_id, offer.rate_per_hour) == (cheaper.pk, Decimal("40"))
    # and a bid on the re-collection above F's agreed rate is refused, at it is taken
    with pytest.raises(ServiceError) as refused:
        bid_place(
            organization=dearer.organization,
            job_id=extra.pk,
            site_id=dearer.sites.get().pk,
            price_per_hour=Decimal("50.0001"),
            earliest_finish=timezone.now() + timedelta(days=1),
        )
    assert refused.value.code == "bid_above_price"
    assert bid_place(
        organization=dearer.organization,
        job_id=extra.pk,
        site_id=dearer.sites.get().pk,
        price_per_hour=Decimal("50"),
        earliest_finish=timezone.now() + timedelta(days=1),
    ).price_per_hour == Decimal("50")


REFUSED = [
    ({"payout_rate_per_hour": 1e9}, "payout_rate_per_hour", "rate_out_of_range"),
    ({"payout_rate_per_hour": "1000000000"}, "payout_rate_per_hour", "rate_out_of_range"),
    ({"payout_rate_per_hour": "10000.0001"}, "payout_rate_per_hour", "rate_out_of_range"),
    ({"payout_rate_per_hour": "-1"}, "payout_rate_per_hour", "rate_out_of_range"),
    ({"payout_rate_per_hour": "0"}, "payout_rate_per_hour", "rate_out_of_range"),
    ({"currency": "XAU"}, "currency", "unknown_currency"),
    ({"currency": "XXX"}, "currency", "unknown_currency"),
    ({"currency": "XTS"}, "currency", "unknown_currency"),
    ({"currency": "CLF"}, "currency", "unknown_currency"),  # a fund code, not money paid
    ({"currency": "usd"}, "currency", "unknown_currency"),
    ({"currency": "ABC"}, "currency", "unknown_currency"),
    # a JPY fleet's ceiling is in yen: 10,000 USD's minor units are 1,000,000 JPY
    ({"currency": "JPY", "payout_rate_per_hour": "1000001"}, "payout_rate_per_hour", None),
]


@pytest.mark.parametrize(("change", "field", "code"), REFUSED)
def test_patch_and_registration_refuse_rates_and_currencies_out_of_the_rules(
    fleet_operator, change, field, code
):
    # given: a fleet paid 50 USD/h
    mine = FleetFactory(organization=fleet_operator.organization)
    url = f"/api/v1/fleet/fleets/{mine.pk}"
    # when: changed, or registered, with a value out of the rules
    patched = fleet_operator.client.patch(url, change, format="json")
    registered = fleet_operator.client.post(
        "/api/v1/fleet/fleets",
        {"name": "n", "weekly_capacity_hours": "10", "payout_rate_per_hour": "50", **change},
        format="json",
    )
    # then: 400 in the one error shape, naming the field; nothing changed or created
    for response in (patched, registered):
        assert response.status_code == 400, response.json()
        body = response.json()
        assert set(body) == {"code", "message", "fields"} and field in body["fields"]
        assert body["code"] == (code or "rate_out_of_range")
    mine.refresh_from_db()
    assert (mine.payout_rate_per_hour, mine.currency) == (Decimal("50"), "USD")
    assert Fleet.objects.filter(organization=fleet_operator.organization).count() == 1


@pytest.mark.parametrize(
    "change",
    [
        {"payout_rate_per_hour": "10000"},
        {"currency": "EUR"},
        {"currency": "XAF"},  # the CFA franc: a real currency, though its code starts with X
        {"currency": "JPY", "payout_rate_per_hour": "1000000"},
    ],
)
def test_patch_accepts_currencies_and_rates_within_the_rules(fleet_operator, change):
    mine = FleetFactory(organization=fleet_operator.organization)
    response = fleet_operator.client.patch(f"/api/v1/fleet/fleets/{mine.pk}", change, format="json")
    assert response.status_code == 200, response.json()


def test_the_admin_form_refuses_what_the_api_refuses():
    # the admin's ModelForm runs full_clean: the field's validator and the model's clean()
    for currency, rate, field in [
        ("XAU", "50", "currency"),
        ("usd", "50", "currency"),
        ("USD", "1000000000", "payout_rate_per_hour"),
        ("USD", "0", "payout_rate_per_hour"),
    ]:
        candidate = FleetFactory.build(currency=currency, payout_rate_per_hour=Decimal(rate))
        with pytest.raises(ValidationError) as refused:
            candidate.full_clean(exclude=["organization"])
        assert field in refused.value.message_dict
    FleetFactory.build(currency="EUR").full_clean(exclude=["organization"])


money = st.decimals(min_value=0, max_value=10**9, places=4, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(
    fleets=st.lists(
        st.tuples(st.sampled_from(["USD", "EUR", "XAU"]), money), min_size=1, max_size=12
    ),
    currency=st.sampled_from(["USD", "EUR"]),
    ceiling=money,
    original=st.integers(-1, 11),
)
@pytest.mark.django_db(False)
def test_the_matchers_arrays_and_the_rule_decide_alike(fleets, currency, ceiling, original):
    """The matcher ranks with the rule over arrays (floats); each offer is decided exactly by
    agreed_rate: both must allow the same fleets at the same rates."""
    terms = PayTerms(currency=currency, ceiling=ceiling, original_fleet_id=original)
    allowed, offered = terms.offer_arrays(
        same_currency=np.array([c == currency for c, _ in fleets]),
        rates=np.array([float(rate) for _, rate in fleets]),
        original=np.arange(len(fleets)) == original,
    )
    for index, (fleet_currency, rate) in enumerate(fleets):
        exact = offered_rate(
            terms=terms, fleet_id=index, fleet_currency=fleet_currency, fleet_rate=rate
        )
        assert allowed[index] == (exact is not None)
        if exact is not None:
            assert offered[index] == float(exact)


def test_staff_read_offers_and_assignments_in_the_admin_but_never_add_or_reprice_one(
    customer, admin_client
):
    job = open_job(customer)
    dollar = fleet("60")
    assignment = Assignment.objects.create(
        job=job, fleet=dollar, site=dollar.sites.get(), rate_per_hour=Decimal("60"), currency="USD"
    )
    for model in ("assignment", "offer"):
        assert admin_client.get(f"/admin/fleets/{model}/add/").status_code == 403
    page = admin_client.get(f"/admin/fleets/assignment/{assignment.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'name="rate_per_hour"' not in html and 'name="currency"' not in html
    assert "60.0000" in html  # shown, read-only
