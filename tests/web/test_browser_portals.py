# ruff: noqa: F811  (the browser fixtures are imported from test_browser)
"""Issue 18 in a real browser (Playwright on Debian's Chromium, the live test server, the
local S3 server): the whole dataset through the page's command and snippet, the order page
updating during collection without a reload, a bank-transfer invoice PDF and its totals, a
confirmation dialog that blocks a revoke, every page at desktop and phone width (no
horizontal overflow, measured with document.documentElement.scrollWidth), and /api/docs/
with the network blocked. Screenshots go to test-artifacts/screenshots/."""

import hashlib
import io
import json
import os
import re
import subprocess
import sys
from decimal import Decimal

import pytest
from pypdf import PdfReader

from billing.models import Invoice, Payment
from datasets.episode_format import episode_table, parquet_bytes
from fleets.models import Job
from marketplace.models import ApiKey, Organization, User
from orders.models import Order
from orders.money import format_money
from tests.datasets.helpers import Collection, put
from tests.datasets.synthetic_delivery import make_ready_delivery, synthetic_files
from tests.factories import MembershipFactory, OrderFactory, OrganizationFactory, UserFactory
from tests.web.fleet_helpers import offered_job, operator_fleet
from tests.web.test_browser import (  # noqa: F401  (fixtures)
    NEEDS_CHROMIUM,
    browser,
    new_page,
    shot,
)

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

pytestmark = [
    NEEDS_CHROMIUM,
    pytest.mark.xdist_group("browser"),  # one Chromium at a time (tests/README.md)
    pytest.mark.django_db(transaction=True),
]

PASSWORD = "pw-for-tests-123"  # tests.factories.UserFactory's
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


def log_in(page, base: str, username: str, next_path: str = "/") -> None:
    page.goto(f"{base}/accounts/login/?next={next_path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(re.escape(next_path) + r"$"))


def overflow(page) -> int:
    """How many pixels the page is wider than the window (0: nothing sticks out)."""
    return page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )


def wide_elements(page) -> list[str]:
    """The elements that stick out of the window, to say what to fix."""
    return page.evaluate(
        """() => [...document.querySelectorAll('body *')]
            .filter(el => el.getBoundingClientRect().right >
                document.documentElement.clientWidth + 1)
            .slice(0, 5).map(el => el.tagName + '#' + el.id + '.' + el.className)"""
    )


def both_widths(page, name: str) -> dict:
    """Screenshots at desktop and phone width; the horizontal overflow at each."""
    measured = {}
    for label, size in (("desktop", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        page.wait_for_timeout(50)
        shot(page, f"{name}-{label}")
        measured[label] = overflow(page)
        if measured[label] > 0:
            measured[f"{label}-culprits"] = wide_elements(page)
    page.set_viewport_size(DESKTOP)
    return measured


def customer_org(username: str = "ada"):
    organization = OrganizationFactory(kind=Organization.Kind.CUSTOMER, name="Grasp Lab")
    user = UserFactory(username=username, email=f"{username}@example.com")
    MembershipFactory(user=user, organization=organization)
    return organization, user


def api_key(organization) -> str:
    from marketplace import services

    return services.api_key_create(organization=organization, name="cli", role="owner").raw_key


# --- Download everything ------------------------------------------------------------------------


def test_download_all_through_the_pages_command_and_snippet(live_server, s3, new_page, tmp_path):
    base = live_server.url
    organization, user = customer_org()
    files = synthetic_files(40)
    delivery = make_ready_delivery(organization, files)
    raw_key = api_key(organization)
    page = new_page()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    log_in(page, base, user.username, f"/orders/{delivery.order_id}/")
    section = page.locator(f"#download-{delivery.id}")
    expect(section).to_be_visible()
    shot(page, "60-order-download-everything")

    # the command on the page: copied with its button, it is what the page shows
    command = page.locator(f"#cli-{delivery.id}").inner_text()
    assert f"marketplace-download.pyz {delivery.id} --base-url {base}" in command
    section.get_by_role("button", name="Copy").first.click()
    assert page.evaluate("navigator.clipboard.readText()") == command
    snippet = page.locator(f"#snippet-{delivery.id}").inner_text()
    folder = re.search(r"--dest (\S+)", command).group(1)
    assert f'LeRobotDataset("marketplace/{delivery.id}", root="{folder}")' in snippet

    # the command file from the page's link, run as the page says (in a temporary folder)
    with page.expect_download() as event:
        section.get_by_role("link", name="download the command").click()
    pyz = tmp_path / "marketplace-download.pyz"
    event.value.save_as(pyz)
    args = command.splitlines()[-1].split()[2:]  # after "python3 marketplace-download.pyz"
    run = subprocess.run(
        [sys.executable, str(pyz), *args],
        cwd=tmp_path,
        env={**os.environ, "MARKETPLACE_API_KEY": raw_key},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr
    root = tmp_path / folder
    manifest = json.loads((root / "manifest.json").read_text())
    assert len(manifest["files"]) == len(files)
    for entry in manifest["files"]:
        data = (root / entry["path"]).read_bytes()
        assert (
            hashlib.sha256(data).hexdigest()
            == entry["sha256"]
            == hashlib.sha256(files[entry["path"]]).hexdigest()
        )
    assert "LeRobotDataset(" in run.stderr and str(root.resolve()) in run.stderr


# --- The live order page ------------------------------------------------------------------------


def upload(collection: Collection, seconds: int, seed: int) -> None:
    data = parquet_bytes(episode_table(frames=seconds * 10, fps=10, seed=seed))
    body = collection.register(data, fps=10).json()
    assert put(body["upload"], data) == 200
    done = collection.operator.client.post(
        f"/api/v1/fleet/episodes/{body['id']}/complete", {}, format="json"
    )
    assert done.status_code == 200, done.json()


def test_the_order_page_updates_itself_during_collection(
    live_server, s3, new_page, make_tenant, eager_celery, settings
):
    settings.ORDER_PAGE_POLL_SECONDS = 1
    base = live_server.url
    customer = make_tenant(Organization.Kind.CUSTOMER)
    operator = make_tenant(Organization.Kind.FLEET_OPERATOR)
    collection = Collection(operator, customer, target_hours="0.5", is_pilot=True)
    page = new_page()
    log_in(page, base, customer.user.username, f"/orders/{collection.order.id}/")
    expect(page.locator("#progress-text")).to_contain_text("0 of 1 hours accepted")
    expect(page.locator(f"#job-{collection.job.id}")).to_contain_text("Accepted by a fleet")
    expect(page.locator(f"#job-{collection.job.id}")).to_contain_text(collection.site.name)
    expect(page.locator("#eta-basis")).to_contain_text("No episode checked yet")
    page.evaluate("window.__sameDocument = 'yes'")
    shot(page, "61-order-live-before")

    # when: the fleet uploads an episode that passes QA (and one that fails), in the background
    upload(collection, seconds=600, seed=3)
    columns = episode_table(frames=600, fps=10, seed=4)
    columns["action"][10, 3] = float("nan")  # a sensor dropout: QA's non_finite
    bad = parquet_bytes(columns)
    registered = collection.register(bad, fps=10)
    assert registered.status_code == 201, registered.json()
    body = registered.json()
    assert put(body["upload"], bad) == 200
    done = collection.operator.client.post(
        f"/api/v1/fleet/episodes/{body['id']}/complete", {}, format="json"
    )
    assert done.status_code == 200, done.json()

    # then: the page shows it by itself, without a reload
    expect(page.locator("#progress-text")).to_contain_text("0.16 of 1 hours accepted")
    expect(page.locator("#eta-basis")).to_contain_text("50 % of checked episodes passed QA")
    expect(page.locator("#qa-reasons")).to_contain_text("Sensor values dropped out")
    expect(page.locator(f"#job-{collection.job.id}")).to_contain_text("10 min of 30 min")
    expect(page.locator("#eta-value")).not_to_have_text("Estimating…")
    assert page.evaluate("window.__sameDocument") == "yes"  # the same document: no reload
    shot(page, "62-order-live-after")


# --- Invoices and bank transfers ----------------------------------------------------------------


def test_a_bank_transfer_invoice_pdf_its_totals_and_the_payment_recorded(
    live_server, new_page, settings
):
    settings.STRIPE_API_KEY = ""
    settings.BILLING_TAX_RATE_PERCENT = "19"
    base = live_server.url
    organization, user = customer_org()
    order = OrderFactory(organization=organization, total=Decimal("2380.00"), hours=Decimal("8"))
    page = new_page()
    log_in(page, base, user.username, f"/orders/{order.pk}/")
    expect(page.locator("#payment")).to_contain_text("Pay by bank transfer")
    page.get_by_role("link", name="Get the invoice").click()
    invoice = Invoice.objects.get(order=order)
    expect(page.locator("#invoice-total")).to_have_text("$2,380.00")
    expect(page.locator("#invoice-reference")).to_have_text(invoice.payment_reference)
    shot(page, "63-invoice")
    with page.expect_download() as event:
        page.get_by_role("link", name="Download PDF").click()
    pdf = PdfReader(io.BytesIO(open(event.value.path(), "rb").read()))  # noqa: SIM115
    text = " ".join(p.extract_text() for p in pdf.pages)
    # the totals add up: net + tax = total, as on the page and in the database
    assert "$2,000.00" in text and "$380.00" in text and "$2,380.00" in text
    assert invoice.net_amount + invoice.tax_amount == invoice.total == order.total
    assert invoice.payment_reference in text and settings.BILLING_BANK_IBAN in text

    # staff record the transfer on the console (confirmed in the dialog)
    User.objects.create_user(username="stella", password=PASSWORD, is_staff=True)
    staff = new_page()
    log_in(staff, base, "stella", "/staff/")
    staff.locator(f"#awaiting-{order.pk}").get_by_role("link", name="Record bank transfer").click()
    expect(staff.get_by_label("Bank reference")).to_have_value(invoice.payment_reference)
    shot(staff, "64-staff-bank-transfer")
    staff.get_by_role("button", name="Record payment").click()
    expect(staff.locator("#confirm-dialog")).to_be_visible()
    staff.locator("#confirm-dialog-ok").click()
    expect(staff.get_by_text("Payment recorded")).to_be_visible()
    payment = Payment.objects.get(order=order)
    assert payment.method == "bank_transfer" and payment.amount == Decimal("2380.00")
    page.goto(f"{base}/orders/{order.pk}/")
    expect(page.locator("#order-status")).to_have_text("Paid")


# --- Confirmation before irreversible actions ---------------------------------------------------


def test_a_confirmation_dialog_blocks_a_revoke(live_server, s3, new_page):
    base = live_server.url
    organization, user = customer_org()
    delivery = make_ready_delivery(organization, synthetic_files(3))
    page = new_page()
    log_in(page, base, user.username, f"/orders/{delivery.order_id}/")
    revoke = page.get_by_role("button", name="Revoke download links")

    # the first click only opens the dialog; "Keep it" (its first button) changes nothing
    revoke.click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("cannot be undone")
    expect(page.locator("#confirm-dialog-cancel")).to_be_focused()
    shot(page, "65-confirm-revoke")
    page.locator("#confirm-dialog-cancel").click()
    expect(dialog).to_be_hidden()
    delivery.refresh_from_db()
    assert delivery.revoked_at is None

    # confirmed: revoked
    revoke.click()
    page.locator("#confirm-dialog-ok").click()
    expect(page.get_by_text("Delivery revoked")).to_be_visible()
    delivery.refresh_from_db()
    assert delivery.revoked_at is not None

    # the API keys page: the key's revoke asks too, and the create button comes first
    page.goto(base + "/account/api-keys/")
    key = ApiKey.objects.filter(organization=organization).first()
    if key is None:
        api_key(organization)
        page.reload()
        key = ApiKey.objects.get(organization=organization)
    buttons = page.locator("main button[type=submit]")
    assert buttons.first.inner_text() == "Create key"
    page.get_by_role("button", name=f"Revoke key {key.name}").click()
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    key.refresh_from_db()
    assert key.revoked_at is None


# --- Every page at desktop and phone width ------------------------------------------------------


def test_every_page_at_desktop_and_phone_width(live_server, s3, new_page, eager_celery):
    base = live_server.url
    organization, user = customer_org()
    delivery = make_ready_delivery(organization, synthetic_files(8))
    order = Order.objects.get(pk=delivery.order_id)
    running = OrderFactory(organization=organization, status=Order.Status.IN_COLLECTION)
    operator = OrganizationFactory(kind=Organization.Kind.FLEET_OPERATOR, name="Teleop Bay")
    otto = UserFactory(username="otto")
    MembershipFactory(user=otto, organization=operator)
    fleet, site, _ = operator_fleet(operator, name="Bay 4")
    job, offer = offered_job(site, customer_org=organization)
    held, _ = offered_job(site, customer_org=organization, sequence=2)
    Job.objects.filter(pk=held.pk).update(status=Job.Status.ASSIGNED)
    Job.objects.filter(pk=job.pk).update(order=running)
    User.objects.create_user(username="stella", password=PASSWORD, is_staff=True)
    results = {}

    visitor = new_page()
    public = {
        "70-home": "/",
        "71-catalog": "/catalog/",
        "72-pricing": "/pricing/",
        "73-price-list": "/prices/",
        "74-signup": "/signup/",
        "75-operator-signup": "/signup/operator/",
        "76-login": "/accounts/login/",
        "77-password-reset": "/accounts/password-reset/",
    }
    for name, path in public.items():
        visitor.goto(base + path)
        results[name] = both_widths(visitor, name)

    customer = new_page()
    log_in(customer, base, user.username)
    pages = {
        "80-customer-dashboard": "/",
        "81-orders": "/orders/",
        "82-order-new": "/orders/new/",
        "83-order-delivered": f"/orders/{order.pk}/",
        "84-order-collecting": f"/orders/{running.pk}/",
        "85-order-episodes": f"/orders/{order.pk}/episodes/",
        "86-invoice": f"/orders/{running.pk}/invoice/",
        "87-api-keys": "/account/api-keys/",
    }
    for name, path in pages.items():
        customer.goto(base + path)
        results[name] = both_widths(customer, name)

    fleet_page = new_page()
    log_in(fleet_page, base, "otto")
    pages = {
        "90-operator-dashboard": "/",
        "91-fleets": "/fleet/",
        "92-fleet-detail": f"/fleet/fleets/{fleet.pk}/",
        "93-offers": "/fleet/offers/",
        "94-jobs": "/fleet/jobs/",
        "95-job-detail": f"/fleet/jobs/{held.pk}/",
        "96-job-collect": f"/fleet/jobs/{held.pk}/collect/",
        "97-earnings": "/fleet/earnings/",
    }
    for name, path in pages.items():
        fleet_page.goto(base + path)
        results[name] = both_widths(fleet_page, name)
    expect(fleet_page.locator("body")).to_be_visible()

    staff = new_page()
    log_in(staff, base, "stella", "/staff/")
    for name, path in {
        "98-staff-attention": "/staff/",
        "99-staff-dispatch": "/staff/dispatch/",
    }.items():
        staff.goto(base + path)
        results[name] = both_widths(staff, name)

    wide = {name: r for name, r in results.items() if r["phone"] > 0 or r["desktop"] > 0}
    assert wide == {}, f"pages wider than the window (px): {wide}"
    assert offer.pk and format_money(Decimal("1"), "USD") == "$1.00"


# --- API docs offline ---------------------------------------------------------------------------


def test_api_docs_render_with_the_network_blocked(live_server, new_page):
    base = live_server.url
    page = new_page()
    blocked = []

    def only_this_site(route):
        if route.request.url.startswith(base):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", only_this_site)
    page.goto(base + "/api/docs/")
    expect(page.locator(".swagger-ui .opblock-tag").first).to_be_visible(timeout=20_000)
    expect(page.locator(".swagger-ui")).to_contain_text("Motion dataset marketplace API")
    shot(page, "78-api-docs-offline")
    assert blocked == [], blocked
    # Redoc too renders offline; its bundle's own "API docs by Redocly" logo is the one
    # request to elsewhere (blocked here, harmlessly)
    page.goto(base + "/api/redoc/")
    expect(page.locator("h1").first).to_contain_text(
        "Motion dataset marketplace API", timeout=20_000
    )
    shot(page, "79-api-redoc-offline")
    assert all("redoc.ly" in url for url in blocked), blocked
