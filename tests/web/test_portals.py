"""Issue 18's pages and services without a browser: the ETA and its basis, the live order
endpoint, invoices (numbering, tax split, PDF totals), bank transfers recorded by staff (a
Payment, a ledger charge, billing totals), the streamed archive, the copy into a customer's
own bucket, the staff console, task cards, operator sign-up, password reset, the dashboard,
the price list, the money format and readable price lines in the admin."""

import io
import re
import subprocess
import sys
import tarfile
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pypdf import PdfReader

from billing.models import BillingFlag, Invoice, LedgerEntry, Payment
from billing.selectors import revenue_summary
from billing.services.invoices import tax_split
from billing.services.payments import payment_record_offline
from billing.services.refunds import order_trueup
from datasets import storage
from datasets.models import BucketExport, Delivery, DownloadEvent, Episode
from datasets.selectors import order_collection_status
from datasets.services.exports import bucket_export_run
from fleets.models import Job, Offer
from marketplace.errors import ServiceError
from marketplace.models import Organization, User
from orders.models import Order
from orders.money import format_money, format_rate
from portal.wording import duration_text, humanize_seconds, readable_line
from tests.datasets.synthetic_delivery import make_ready_delivery, synthetic_files
from tests.factories import FleetFactory, JobFactory, OrderFactory, RobotFactory, SiteFactory
from tests.web.conftest import logged_in
from tests.web.fleet_helpers import offered_job, operator_fleet

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(db):
    user = User.objects.create_user(username="stella", password="pw-staff-123", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


# --- Formatting ------------------------------------------------------------------------------


def test_one_money_format_with_symbol_and_minor_units():
    assert format_money(Decimal("1234.5"), "USD") == "$1,234.50"
    assert format_money(Decimal("-12"), "EUR") == "-€12.00"
    assert format_money(Decimal("1234.5"), "JPY") == "¥1,235"  # no minor unit, half-up
    assert format_money("0.005", "USD") == "$0.01"
    assert format_rate(Decimal("40.1250"), "USD") == "$40.125/h"
    with pytest.raises(TypeError):
        format_money(1.5, "USD")


def test_durations_and_price_lines_read_as_people_write_them():
    assert duration_text(Decimal("5496.002")) == "1 h 32 min"
    assert duration_text(Decimal("45.2")) == "45 s"
    assert humanize_seconds("Dataset delivered: 3 episodes, 5496.002 s.") == (
        "Dataset delivered: 3 episodes, 1 h 32 min."
    )
    line = "20 h x 180.0000 USD/h (franka-fr3) x 2.200 (complexity L4)"
    assert readable_line(line, {"franka-fr3": "Franka FR3"}) == (
        "20 h x $180.00/h (Franka FR3) x 2.200 (complexity L4)"
    )


# --- ETA ---------------------------------------------------------------------------------------


def test_the_eta_comes_from_capacity_acceptance_and_deadlines(customer):
    # given: an order of 2 jobs; one held by a fleet of 10 h/week, 1 h still to accept;
    # the other not taken yet; 3 of 4 checked episodes accepted
    now = timezone.now()
    order = OrderFactory(
        organization=customer.organization, status=Order.Status.IN_COLLECTION, hours=Decimal("2")
    )
    fleet = FleetFactory(weekly_capacity_hours=Decimal("10"))
    site = SiteFactory(fleet=fleet, name="Lyon bench", kind="lab_bench")
    held = JobFactory(order=order, site=site, fleet=fleet, target_hours=Decimal("1"), sequence=1)
    open_job = JobFactory(
        order=order,
        site=None,
        fleet=None,
        status=Job.Status.OPEN,
        sequence=2,
        environment_index=1,
        deadline=now + timedelta(days=20),
    )
    for index, status in enumerate(["accepted", "accepted", "accepted", "rejected"]):
        Episode.objects.create(
            job=held,
            order=order,
            fleet=fleet,
            site=site,
            robot=RobotFactory(site=site, fleet=fleet),
            operator="op",
            task_instruction="t",
            success=True,
            fps=30,
            size_bytes=1,
            sha256=f"{index:064x}",
            upload_key=f"k{index}",
            status=status,
            frames=30 if status == "accepted" else None,
            duration_seconds=Decimal("1") if status == "accepted" else None,
        )

    # when
    status = order_collection_status(order=order, now=now)

    # then: 1 h / 0.75 accepted / 10 h per week = 0.1333 weeks = 22.4 h for the held job;
    # the open job counts at its deadline (20 days), which is the later one
    held_row = next(row for row in status.jobs if row.id == str(held.id))
    assert abs((held_row.finish - now).total_seconds() / 3600 - 22.4) < 0.01
    assert status.eta == open_job.deadline
    assert held_row.site_name == "Lyon bench" and held_row.site_kind == "Lab bench"
    assert status.acceptance_rate == Decimal("0.75")
    text = " ".join(status.basis)
    assert "75 % of checked episodes passed QA so far (3 of 4)" in text
    assert "1 job held by 1 fleet, with 10.0 h/week" in text
    assert "1 job not taken by a fleet yet" in text
    assert not status.late


def eta_section(client, order) -> str:
    page = client.get(reverse("order-detail-page", args=[order.pk])).content.decode()
    return page[page.index('id="eta"') : page.index("</section>", page.index('id="eta"'))]


def test_an_order_awaiting_payment_starts_when_paid(customer):
    # given: an order awaiting payment says it starts when paid, with no date
    order = OrderFactory(organization=customer.organization, total=Decimal("500.00"))
    client = logged_in(customer)
    status = order_collection_status(order=order)
    assert status.state == "not_started" and status.eta is None
    unpaid = eta_section(client, order)
    assert "Starts when paid" in unpaid and "Collection starts when the order is paid." in unpaid

    # when: its bank transfer is recorded (the staff console's service)
    payment_record_offline(
        order_id=order.pk, amount=Decimal("500.00"), reference="BANK-7", recorded_by="staff:t"
    )

    # then: the order is paid and the page estimates instead of waiting for the money
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert order_collection_status(order=order).state == "estimating"
    paid = eta_section(client, order)
    assert "Starts when paid" not in paid and "when the order is paid" not in paid
    assert "Estimating…" in paid and "Jobs are being planned." in paid


# --- The live order page -------------------------------------------------------------------------


def test_the_live_endpoint_sends_the_pages_live_parts(customer, other_customer):
    order = OrderFactory(organization=customer.organization, status=Order.Status.IN_COLLECTION)
    JobFactory(order=order, sequence=1)
    client = logged_in(customer)
    body = client.get(reverse("order-live-page", args=[order.pk])).json()
    assert body["status"] == "in_collection" and body["live"] is True
    assert set(body["sections"]) == {"eta", "progress", "coverage", "quality", "timeline"}
    assert 'id="eta-value"' in body["sections"]["eta"]
    assert 'id="jobs"' in body["sections"]["progress"]
    page = client.get(reverse("order-detail-page", args=[order.pk])).content.decode()
    assert 'data-live-url="/orders/' in page and 'data-live-section="progress"' in page
    # another organization's order does not exist for them
    other = logged_in(other_customer).get(reverse("order-live-page", args=[order.pk]))
    assert other.status_code == 404


def test_qa_reasons_in_words_link_to_the_episodes(customer):
    order = OrderFactory(organization=customer.organization, status=Order.Status.IN_COLLECTION)
    job = JobFactory(order=order)
    from tests.factories import RobotFactory

    robot = RobotFactory(site=job.site, fleet=job.site.fleet)
    Episode.objects.create(
        job=job,
        order=order,
        fleet=job.site.fleet,
        site=job.site,
        robot=robot,
        operator="op-2",
        task_instruction="t",
        success=True,
        fps=30,
        size_bytes=1,
        sha256="0" * 64,
        upload_key="k",
        status="rejected",
        qa_failures=[{"code": "non_finite", "message": "action contains NaN or infinity."}],
    )
    client = logged_in(customer)
    page = client.get(reverse("order-detail-page", args=[order.pk])).content.decode()
    assert "Sensor values dropped out" in page
    link = reverse("order-episodes-page", args=[order.pk]) + "?reason=non_finite"
    assert link in page
    episodes = client.get(link).content.decode()
    assert "op-2" in episodes and "Sensor values dropped out" in episodes


# --- Invoices and bank transfers -----------------------------------------------------------------


def test_tax_split_adds_up():
    assert tax_split(Decimal("119.00"), Decimal("19"), "USD") == (
        Decimal("100.00"),
        Decimal("19.00"),
    )
    net, tax = tax_split(Decimal("10.00"), Decimal("7"), "USD")
    assert net + tax == Decimal("10.00")


def test_an_invoice_is_issued_once_numbered_and_its_pdf_has_the_totals(customer, settings):
    settings.BILLING_TAX_RATE_PERCENT = "19"
    order = OrderFactory(organization=customer.organization, total=Decimal("1190.00"))
    client = logged_in(customer)
    page = client.get(reverse("invoice-page", args=[order.pk])).content.decode()
    invoice = Invoice.objects.get(order=order)
    assert re.fullmatch(r"INV-\d{4}-\d{6}", invoice.number)
    assert invoice.net_amount == Decimal("1000.00") and invoice.tax_amount == Decimal("190.00")
    assert invoice.payment_reference in page and "$1,190.00" in page
    client.get(reverse("invoice-page", args=[order.pk]))
    assert Invoice.objects.filter(order=order).count() == 1  # issued once
    second = OrderFactory(organization=customer.organization)
    client.get(reverse("invoice-page", args=[second.pk]))
    numbers = sorted(Invoice.objects.values_list("number", flat=True))
    assert int(numbers[1][-6:]) == int(numbers[0][-6:]) + 1  # no gaps
    pdf = client.get(reverse("invoice-pdf-page", args=[order.pk]))
    assert pdf["Content-Type"] == "application/pdf"
    text = " ".join(p.extract_text() for p in PdfReader(io.BytesIO(pdf.content)).pages)
    for expected in (
        "$1,000.00",
        "$190.00",
        "$1,190.00",
        invoice.payment_reference,
        invoice.number,
    ):
        assert expected in text, expected


def test_staff_record_a_bank_transfer_a_payment_and_ledger_entry(customer, staff_client):
    order = OrderFactory(organization=customer.organization, total=Decimal("500.00"))
    url = reverse("staff-bank-transfer", args=[order.pk])
    # a wrong amount is refused with what was expected
    wrong = staff_client.post(url, {"amount": "400", "reference": "BANK-1", "confirmed": "yes"})
    assert "The invoice is for 500.00 USD" in wrong.content.decode()
    # unconfirmed: the confirmation page, nothing written
    asked = staff_client.post(url, {"amount": "500.00", "reference": "BANK-1"})
    assert b'id="confirm-page"' in asked.content
    assert not Payment.objects.filter(order=order).exists()
    done = staff_client.post(url, {"amount": "500.00", "reference": "BANK-1", "confirmed": "yes"})
    assert done.status_code == 302
    payment = Payment.objects.get(order=order)
    assert payment.method == "bank_transfer" and payment.status == "succeeded"
    assert payment.reference == "BANK-1" and payment.recorded_by == "staff:stella"
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    legs = dict(LedgerEntry.objects.filter(payment=payment).values_list("account", "amount"))
    assert legs == {"bank": Decimal("500.00"), "customer_funds": Decimal("-500.00")}
    usd = next(c for c in revenue_summary()["currencies"] if c["currency"] == "USD")
    assert usd["charged"] == Decimal("500.00") and usd["balanced"]
    # a second record is refused
    with pytest.raises(ServiceError):
        payment_record_offline(
            order_id=order.pk, amount=Decimal("500.00"), reference="X", recorded_by="staff:x"
        )


def test_hours_not_delivered_on_a_transfer_are_flagged_for_a_manual_refund(customer):
    order = OrderFactory(organization=customer.organization, total=Decimal("100.00"))
    payment_record_offline(
        order_id=order.pk, amount=Decimal("100.00"), reference="B-7", recorded_by="staff:x"
    )
    Order.objects.filter(pk=order.pk).update(status=Order.Status.DELIVERED)
    assert order_trueup(order_id=order.pk) is None
    flag = BillingFlag.objects.get(kind=BillingFlag.Kind.MANUAL_REFUND)
    assert "bank transfer B-7" in flag.message


# --- Deliveries: archive, bucket copy, the command -----------------------------------------------


def test_the_archive_is_streamed_and_holds_exactly_the_files(s3, customer):
    files = synthetic_files(20)
    delivery = make_ready_delivery(customer.organization, files)
    response = logged_in(customer).get(reverse("delivery-archive-page", args=[delivery.pk]))
    assert response.streaming and response["Content-Type"] == "application/x-tar"
    data = b"".join(response.streaming_content)
    assert len(data) == int(response["Content-Length"])
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        names = {m.name.split("/", 1)[1]: archive.extractfile(m).read() for m in archive}
    assert {k: v for k, v in names.items() if k != "manifest.json"} == files
    assert DownloadEvent.objects.filter(delivery=delivery, path__startswith="archive:").exists()


def test_an_archive_too_large_is_refused_with_the_way_out(s3, customer, settings):
    settings.DELIVERY_ARCHIVE_MAX_BYTES = 1000
    delivery = make_ready_delivery(customer.organization, synthetic_files(3))
    response = logged_in(customer).get(
        reverse("delivery-archive-page", args=[delivery.pk]), follow=True
    )
    assert "Use the marketplace-download command" in response.content.decode()


def test_a_delivery_is_copied_into_the_customers_own_bucket_and_verified(s3, customer, settings):
    # given: a second bucket on the local S3 server, as the customer's
    target = storage.foreign_client(
        endpoint_url=s3.endpoint_url,
        region="us-east-1",
        access_key=s3.access_key,
        secret_key=s3.secret_key,
    )
    target.create_bucket(Bucket="customer-bucket")
    settings.DELIVERY_EXPORT_ENDPOINTS = [s3.endpoint_url]
    files = synthetic_files(5)
    delivery = make_ready_delivery(customer.organization, files)
    form = {
        "bucket": "customer-bucket",
        "prefix": "robot-data/run-1",
        "region": "us-east-1",
        "endpoint_url": s3.endpoint_url,
        "access_key_id": s3.access_key,
        "secret_access_key": s3.secret_key,
    }
    client = logged_in(customer)

    # when
    from django.test.utils import CaptureQueriesContext  # noqa: F401

    response = client.post(reverse("delivery-export-page", args=[delivery.pk]), form)
    assert response.status_code == 302
    export = BucketExport.objects.get(delivery=delivery)
    bucket_export_run(export_id=export.pk)

    # then: every file is there, verified; the secret is gone
    export.refresh_from_db()
    assert export.status == "verified" and export.files_done == len(files) + 1
    assert export.secret_access_key == ""
    for path, data in files.items():
        body = target.get_object(Bucket="customer-bucket", Key=f"robot-data/run-1/{path}")
        assert body["Body"].read() == data


def test_an_endpoint_not_allowed_is_refused_next_to_its_field(s3, customer, settings):
    settings.DELIVERY_EXPORT_ENDPOINTS = []
    delivery = make_ready_delivery(customer.organization, synthetic_files(1))
    response = logged_in(customer).post(
        reverse("delivery-export-page", args=[delivery.pk]),
        {
            "bucket": "x-bucket",
            "region": "us-east-1",
            "endpoint_url": "http://10.0.0.1:9000",
            "access_key_id": "a",
            "secret_access_key": "b",
        },
    )
    html = response.content.decode()
    assert "copies only to AWS S3" in html and not BucketExport.objects.exists()


def test_wrong_keys_fail_the_copy_with_a_clear_reason(s3, customer, settings):
    settings.DELIVERY_EXPORT_ENDPOINTS = [s3.endpoint_url]
    delivery = make_ready_delivery(customer.organization, synthetic_files(1))
    export = BucketExport.objects.create(
        delivery=delivery,
        requested_by="user:x",
        bucket="no-such-bucket-here",
        endpoint_url=s3.endpoint_url,
        access_key_id=s3.access_key,
        secret_access_key=s3.secret_key,
    )
    bucket_export_run(export_id=export.pk)
    export.refresh_from_db()
    assert export.status == "failed" and "no-such-bucket-here" in export.error
    assert export.secret_access_key == ""


def test_the_download_command_is_served_as_one_runnable_file(client, tmp_path):
    response = client.get(reverse("download-client"))
    path = tmp_path / "marketplace-download.pyz"
    path.write_bytes(response.content)
    run = subprocess.run(
        [sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0 and "manifest.json" in run.stdout


def test_the_order_page_shows_the_command_and_the_snippet(s3, customer):
    delivery = make_ready_delivery(customer.organization, synthetic_files(2))
    html = logged_in(customer).get(reverse("order-detail-page", args=[delivery.order_id]))
    html = html.content.decode()
    assert f"python3 marketplace-download.pyz {delivery.id}" in html
    assert f'LeRobotDataset("marketplace/{delivery.id}", root="./dataset-' in html
    assert 'data-copy="snippet-' in html


# --- Staff console -----------------------------------------------------------------------------


def test_the_staff_console_is_for_staff_only(customer, staff_client):
    for name in ("staff-attention", "staff-dispatch"):
        assert logged_in(customer).get(reverse(name)).status_code == 403
        assert Client().get(reverse(name)).status_code == 302
        assert staff_client.get(reverse(name)).status_code == 200
    order = OrderFactory(organization=customer.organization)
    assert (
        logged_in(customer).post(reverse("staff-bank-transfer", args=[order.pk])).status_code == 403
    )


def test_needs_attention_lists_and_acts(customer, staff_client, eager_celery):
    flagged = JobFactory(status=Job.Status.FLAGGED, flag_reason="No fleet has a suction cup.")
    failed_order = OrderFactory(organization=customer.organization, status="in_review")
    Delivery.objects.create(
        order=failed_order, kind="full", status="failed", prefix="p", failure_reason="boom."
    )
    flag = BillingFlag.objects.create(kind="dispute", dedupe_key="d1", message="Dispute on X.")
    awaiting = OrderFactory(organization=customer.organization)
    page = staff_client.get(reverse("staff-attention")).content.decode()
    assert "No fleet has a suction cup." in page and "boom." in page and "Dispute on X." in page
    assert reverse("staff-bank-transfer", args=[awaiting.pk]) in page
    # resolve a flag: asked first, then done
    url = reverse("staff-flag-resolve", args=[flag.pk])
    assert b'id="confirm-page"' in staff_client.post(url).content
    staff_client.post(url, {"confirmed": "yes"})
    flag.refresh_from_db()
    assert flag.resolved_at is not None
    # re-dispatch the flagged job (nobody eligible again: flagged again, dispatch ran)
    staff_client.post(reverse("staff-redispatch", args=[flagged.pk]))
    assert flagged.events.filter(reason="Re-dispatch by staff.").exists()


# --- The fleet portal's task cards -------------------------------------------------------------


def test_an_offer_shows_pay_criterion_objects_and_capacity(fleet_operator):
    _, site, _ = operator_fleet(fleet_operator.organization, weekly_capacity_hours=Decimal("20"))
    site.objects_available = ["peg", "hole plate"]
    site.save()
    job, offer = offered_job(site)
    job.order.success_criterion = "peg fully seated"
    job.order.notes = "No gloves."
    job.order.save()
    html = logged_in(fleet_operator).get(reverse("offer-list-page")).content.decode()
    card = html[html.index(f'id="offer-{offer.pk}"') :]
    assert "$100.00" in card and "2 accepted h x $50.00/h" in card  # 2 h x the fleet's rate
    assert "peg fully seated" in card and "hole plate" in card and "No gloves." in card
    assert "h already committed" in card
    collect = logged_in(fleet_operator).get(reverse("job-collect-page", args=[job.pk]))
    assert f"fleet-agent --config fleet.toml --job {job.pk}" in collect.content.decode()


# --- Accounts ------------------------------------------------------------------------------------


def test_operators_sign_up_and_land_on_the_fleet_portal(client):
    response = client.post(
        reverse("operator-signup"),
        {
            "organization_name": "Teleop Bay",
            "username": "otto2",
            "email": "otto2@example.com",
            "password1": "a-long-unusual-passphrase-7",
            "password2": "a-long-unusual-passphrase-7",
        },
    )
    assert response.status_code == 302 and response.url == reverse("fleet-overview-page")
    assert Organization.objects.get(name="Teleop Bay").kind == Organization.Kind.FLEET_OPERATOR


def test_password_reset_by_email(client, customer):
    customer.user.email = "ada@example.com"
    customer.user.save()
    client.post(reverse("password_reset"), {"email": "ada@example.com"})
    assert len(mail.outbox) == 1
    link = re.search(r"http://testserver(/accounts/reset/\S+/)", mail.outbox[0].body).group(1)
    form = client.get(link, follow=True)
    assert b"Choose a new password" in form.content
    done = client.post(
        form.redirect_chain[-1][0],
        {
            "new_password1": "another-long-passphrase-9",
            "new_password2": "another-long-passphrase-9",
        },
        follow=True,
    )
    assert b"Your new password is set" in done.content
    customer.user.refresh_from_db()
    assert customer.user.check_password("another-long-passphrase-9")


def test_signed_in_people_land_on_their_dashboard(customer, fleet_operator, make_tenant):
    OrderFactory(organization=customer.organization, status=Order.Status.IN_COLLECTION)
    customer_home = logged_in(customer).get("/").content.decode()
    assert "Welcome back" in customer_home and "1</span>orders in progress" in customer_home
    # the operator's fleet has three offers pending and one declined; another operator one
    _, site, _ = operator_fleet(fleet_operator.organization)
    for sequence in (1, 2, 3):
        offered_job(site, sequence=sequence)
    Offer.objects.filter(pk=offered_job(site, sequence=4)[1].pk).update(
        status=Offer.Status.DECLINED
    )
    _, elsewhere, _ = operator_fleet(make_tenant(Organization.Kind.FLEET_OPERATOR).organization)
    offered_job(elsewhere)
    operator_home = logged_in(fleet_operator).get("/").content.decode()
    assert '<span class="value">3</span>offers waiting' in operator_home
    assert '<span class="value">1</span>fleets' in operator_home
    assert "Real-robot training data, to order" in Client().get("/").content.decode()


def test_the_price_list_comes_from_the_rate_card(client):
    from orders.selectors import rate_card_current, rate_card_terms

    terms = rate_card_terms(rate_card_current())
    _, base = next(iter(terms.embodiment_rates.items()))
    level, multiplier = next(iter(terms.complexity_multipliers.items()))
    html = client.get(reverse("price-list")).content.decode()
    assert format_money(base * multiplier, terms.currency) in html
    assert f"L{level}" in html


def test_the_admin_shows_readable_price_lines_in_the_money_format(customer, admin_client):
    order = OrderFactory(organization=customer.organization, total=Decimal("1000.00"))
    html = admin_client.get(reverse("admin:orders_order_change", args=[order.pk])).content.decode()
    assert "<th>Unit</th>" in html and "$1,000.00" in html
    listing = admin_client.get(reverse("admin:orders_order_changelist")).content.decode()
    assert "$1,000.00" in listing
