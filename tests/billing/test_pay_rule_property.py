"""Property (issue 28, item 4): whatever fleets do to their rates, however episodes are
accepted, excluded with re-collection or with credit and collected again, by fleets paid in
several currencies, after every step a job's payables never exceed the customer money for the
same accepted seconds (the order's price per hour x those seconds), per job and per currency;
every offer and assignment is in the order's currency at most at its price per hour, and a
re-collection pays its original fleet the original agreed rate and others at most that.

Real services end to end on PostgreSQL and the local S3 server: dispatch (batch, on commit),
offers answered through the fleets' services, episodes registered, uploaded and checked by QA
through the fleet API, staff exclusions (datasets.services.exclusions.episodes_exclude),
delivery (the dataset assembled) and billing's payables and their reversal (Celery eager)."""

import contextlib
import hashlib
import itertools
from decimal import Decimal

import pytest
from django.db import transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from billing.models import FleetPayable
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Episode
from datasets.services.exclusions import episodes_exclude
from fleets.models import Assignment, Job, Offer
from fleets.services.dispatch import offer_accept, offer_decline, open_jobs_dispatch
from fleets.services.jobs import job_redispatch
from fleets.services.planning import order_plan
from fleets.services.registry import fleet_update
from marketplace.errors import ServiceError
from marketplace.models import Organization
from orders.models import Order
from orders.pricing import quantize_money
from orders.services import order_transition
from tests.conftest import celery_eagerly
from tests.datasets.helpers import put
from tests.factories import OrderFactory, equipped_site

pytestmark = pytest.mark.django_db

SEEDS = itertools.count(1000)
FLEETS = 3
# A fleet's rate: per mille of the order's price per hour (some above it), or out of the range
# a fleet may set at all (refused).
rate = st.one_of(
    st.integers(1, 2500).map(lambda per_mille: ("of_price", per_mille)),
    st.sampled_from(["0", "-1", "10000.01", "1000000000"]).map(lambda v: ("absolute", v)),
)
step = st.one_of(
    st.tuples(st.just("rate"), st.integers(0, FLEETS - 1), rate),
    # answer the pending offers: accept (mostly) or decline
    st.tuples(st.just("respond"), st.sampled_from([True, True, True, False])),
    st.tuples(st.just("episode"), st.integers(150, 900)),  # an episode's frames (30 fps)
    st.tuples(st.just("episode"), st.integers(150, 900)),
    st.just("deliver"),
    # a round of collection: offers accepted, episodes until the jobs are done, delivered
    st.just("collect"),
    st.just("collect"),
    st.tuples(st.just("exclude"), st.integers(0, 30), st.sampled_from(["recollect", "credit"])),
    st.tuples(st.just("exclude"), st.integers(0, 30), st.just("recollect")),
    st.just("dispatch"),
)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    rates=st.lists(st.integers(1, 1500), min_size=FLEETS, max_size=FLEETS),  # of the price, ‰
    currencies=st.lists(st.sampled_from(["USD", "EUR"]), min_size=FLEETS, max_size=FLEETS),
    order_currency=st.sampled_from(["USD", "EUR"]),
    price_cents=st.integers(1_000, 20_000),  # the customer's price per hour
    steps=st.lists(step, min_size=4, max_size=20),
)
@pytest.mark.usefixtures("s3")
def test_payables_never_exceed_the_customer_money_for_the_same_seconds(
    make_tenant,
    django_capture_on_commit_callbacks,
    rates,
    currencies,
    order_currency,
    price_cents,
    steps,
):
    # Examples share the test's transaction: each runs in a savepoint rolled back afterwards.
    savepoint = transaction.savepoint()
    try:
        with celery_eagerly():
            run_example(
                make_tenant,
                django_capture_on_commit_callbacks,
                rates,
                currencies,
                order_currency,
                price_cents,
                steps,
            )
    finally:
        transaction.savepoint_rollback(savepoint)


def run_example(make_tenant, capture, rates, currencies, order_currency, price_cents, steps):
    # given: three fleets (rates and currencies drawn), each its operator's, and a paid order of
    # 36 s (0.01 h: an episode or two) in one environment
    operators = [make_tenant(Organization.Kind.FLEET_OPERATOR) for _ in range(FLEETS)]
    sites = [
        equipped_site(
            organization=operator.organization,
            payout_rate_per_hour=(Decimal(price_cents) * per_mille / 100_000).quantize(
                Decimal("0.01")
            ),
            currency=currency,
        )
        for operator, per_mille, currency in zip(operators, rates, currencies, strict=True)
    ]
    clients = {s.fleet_id: operator.client for s, operator in zip(sites, operators, strict=True)}
    order = OrderFactory(
        status=Order.Status.PAID,
        hours=Decimal("0.01"),
        environments=1,
        currency=order_currency,
        total=Decimal(price_cents) / 10_000,
    )
    with capture(execute=True):
        order_plan(order_id=order.id)
    check(order)
    # when: the steps, each checked
    for name in expand(steps):
        # a rule may refuse a step (e.g. excluding in a state that does not allow it)
        with capture(execute=True), contextlib.suppress(ServiceError):
            do(name, order, sites, clients)
        check(order)
    seen(order)


def expand(steps):
    """A round of collection is steps of its own (each committed and checked)."""
    for name in steps:
        if name == "collect":
            yield from [("respond", True), ("episode", 600)] * 3
            yield "deliver"
        else:
            yield name


def do(name, order: Order, sites, clients) -> None:
    kind = name if isinstance(name, str) else name[0]
    if kind == "rate":
        _, index, (how, value) = name
        fleet = sites[index].fleet
        order.refresh_from_db()
        price = order.total / order.hours
        rate = (price * value / 1000).quantize(Decimal("0.01")) if how == "of_price" else value
        allowed = 0 < Decimal(rate) <= 10_000
        try:
            fleet_update(
                organization=fleet.organization,
                fleet_id=fleet.pk,
                changes={"payout_rate_per_hour": rate},
            )
        except ServiceError as refused:
            assert not allowed and refused.code == "rate_out_of_range"
        else:
            assert allowed
    elif kind == "respond":
        for offer in Offer.objects.filter(job__order=order, status=Offer.Status.PENDING):
            respond = offer_accept if name[1] else offer_decline
            respond(organization=offer.fleet.organization, offer_id=offer.pk)
    elif kind == "episode":
        upload_episode(order, name[1], clients)
    elif kind == "deliver":
        order.refresh_from_db()
        if order.status == Order.Status.IN_REVIEW:
            order_transition(order_id=order.id, to_status=Order.Status.DELIVERED, actor_label="t")
    elif kind == "exclude":
        accepted = list(
            Episode.objects.filter(order=order, status=Episode.Status.ACCEPTED).order_by("pk")
        )
        if accepted:
            episodes_exclude(
                order_id=order.id,
                reason_code="wrong_task",
                staff_label="staff:property",
                episode_ids=[accepted[name[1] % len(accepted)].pk],
                remedy=name[2],
            )
    elif kind == "dispatch":
        for job in Job.objects.filter(order=order, status=Job.Status.FLAGGED):
            job_redispatch(job_id=job.pk, actor_label="staff:property")
        open_jobs_dispatch()


def upload_episode(order: Order, frames: int, clients: dict) -> None:
    """The fleet holding the first job being collected registers, uploads and completes a new
    episode (a trajectory of its own) through the fleet API; QA runs when the step commits."""
    job = (
        Job.objects.filter(order=order, status__in=[Job.Status.ASSIGNED, Job.Status.IN_PROGRESS])
        .select_related("site")
        .order_by("sequence")
        .first()
    )
    if job is None:
        return
    data = parquet_bytes(episode_table(frames=frames, seed=next(SEEDS)))
    client = clients[job.fleet_id]
    registered = client.post(
        f"/api/v1/fleet/jobs/{job.id}/episodes",
        {
            "site": str(job.site_id),
            "robot": str(job.site.robots.get().id),
            "operator": "op-1",
            "task_instruction": "insert the peg",
            "success": True,
            "fps": 30,
            "size_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "frames": frames,
        },
        format="json",
    )
    assert registered.status_code == 201, registered.json()
    body = registered.json()
    assert put(body["upload"], data) == 200
    completed = client.post(f"/api/v1/fleet/episodes/{body['id']}/complete", {}, format="json")
    assert completed.status_code == 200, completed.json()


def seen(order: Order) -> None:
    """What the example reached (--hypothesis-show-statistics)."""
    if FleetPayable.objects.filter(order=order).exists():
        event("payables recorded")
    if FleetPayable.objects.filter(order=order, deductions__isnull=False).exists():
        event("payables reversed")
    recollections = Job.objects.filter(order=order, recollection_of__isnull=False)
    if recollections.exists():
        event("re-collection job")
    if Assignment.objects.filter(job__in=recollections).exists():
        event("re-collection assigned")
    if FleetPayable.objects.filter(job__in=recollections).exists():
        event("re-collection paid")


def customer_money(order: Order, seconds: Decimal) -> Decimal:
    """What the customer pays for `seconds` of the order (its price per hour x them)."""
    return quantize_money(order.total * seconds / (order.hours * 3600), order.currency)


def check(order: Order) -> None:
    order.refresh_from_db()
    price = order.total / order.hours
    # every offer and assignment: the order's currency, at most its price per hour; on a
    # re-collection at most the original agreed rate, which its original fleet gets
    terms = [
        *Offer.objects.filter(job__order=order).select_related("job"),
        *Assignment.objects.filter(job__order=order).select_related("job"),
    ]
    for row in terms:
        assert row.currency == order.currency, row
        assert 0 <= row.rate_per_hour <= price, (row, row.rate_per_hour, price)
        job = row.job
        if job.recollection_of_id is not None:
            original = Assignment.objects.filter(job_id=job.recollection_of_id).latest("created_at")
            assert (job.original_fleet_id, job.original_rate_per_hour) == (
                original.fleet_id,
                original.rate_per_hour,
            )
            assert row.rate_per_hour <= original.rate_per_hour
            if row.fleet_id == original.fleet_id and isinstance(row, Offer):
                ceiling = price.quantize(Decimal("0.0001"), "ROUND_DOWN")
                assert row.rate_per_hour == min(original.rate_per_hour, ceiling)
    # payables, per job and per currency: never more than the customer pays for those seconds
    for payable in FleetPayable.objects.filter(order=order).select_related("job"):
        assert payable.currency == order.currency
        carried = payable.deductions.filter(in_place=False)
        seconds = payable.accepted_seconds - sum((d.seconds for d in carried), Decimal(0))
        amount = payable.amount - sum((d.amount for d in carried), Decimal(0))
        assert seconds == min(payable.job.accepted_seconds, payable.job.target_seconds)
        assert 0 <= amount <= customer_money(order, seconds), (amount, seconds, price)
        # (a payable may still be held by the order-level check: the customer keeps paying for
        # accepted time in hundredths of an hour, rounded down)
