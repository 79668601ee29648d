"""The portal in a real browser: Playwright for Python driving Debian's Chromium against the
live test server. A customer signs up, prices a dataset (the total updates as they type),
places an order through the wizard and follows it; a second customer cannot see it.
Screenshots of each main page go to test-artifacts/screenshots/."""

import os
import re
import shutil
from pathlib import Path

import pytest

from billing.models import Payment
from orders.models import Order
from orders.services import order_mark_paid

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect
expect.set_options(timeout=10_000)  # two shared cores: give the live price a moment

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
PASSWORD = "a-long-unusual-passphrase-7"

# A laptop without Debian's chromium skips the browser tests; CI (CI=true, where .ci/run
# installs it) never does: there a missing browser fails the tests instead of hiding them.
NEEDS_CHROMIUM = pytest.mark.skipif(
    not shutil.which(CHROMIUM) and not os.environ.get("CI"),
    reason="needs Debian's chromium package (apt-get install chromium)",
)

pytestmark = [
    NEEDS_CHROMIUM,
    pytest.mark.xdist_group("browser"),  # one Chromium at a time (tests/README.md)
    # live_server runs in another thread: data must be committed to be seen there.
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture(scope="module")
def browser():
    # Playwright's sync API keeps an event loop running in this thread; the ORM calls the test
    # itself makes (fixtures, assertions) are still plain synchronous code.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with playwright_sync.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            # --no-zygote: no zygote processes; on this 2-core VM's kernel two zygotes reaping
            # a closed browser's children once spun in the kernel (shrink_dcache_parent) and
            # starved the machine for half an hour
            args=[
                "--no-sandbox",
                "--no-zygote",
                "--disable-gpu",
                "--disable-background-networking",
            ],
        )
        yield browser
        browser.close()
    if previous is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def new_page(browser):
    contexts = []

    def make():
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        return page

    yield make
    for context in contexts:
        context.close()


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def assert_every_control_is_labelled(page) -> None:
    """Every visible form control has an accessible name (a <label>, or aria-label)."""
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea')]
            .filter(el => el.type !== 'hidden')
            .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label'))
            .map(el => el.name || el.id)"""
    )
    assert unlabelled == []


def sign_up(page, base_url: str, username: str, organization: str) -> None:
    page.goto(base_url + "/")
    page.get_by_role("link", name="Sign up").click()
    assert_every_control_is_labelled(page)
    page.get_by_label("Organization").fill(organization)
    page.get_by_label("Username").fill(username)
    page.get_by_label("Email").fill(f"{username}@example.com")
    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_label("Password again").fill(PASSWORD)
    page.get_by_role("button", name="Create account").click()
    expect(page).to_have_url(re.compile(r"/orders/$"))


def test_customer_signs_up_prices_orders_and_follows_the_order(live_server, new_page):
    page = new_page()
    base = live_server.url

    # Public pages
    page.goto(base + "/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Real-robot training data, to order")
    shot(page, "01-home")
    page.keyboard.press("Tab")  # keyboard users can skip the navigation
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.goto(base + "/catalog/")
    expect(page.get_by_role("heading", name="The complexity rubric")).to_be_visible()
    shot(page, "02-catalog")

    # Sign up: lands on the (empty) order list
    sign_up(page, base, "ada", "Grasp Lab")
    expect(page.get_by_text("No orders yet.")).to_be_visible()
    shot(page, "03-orders-empty")

    # The price calculator updates the total as the customer types
    page.get_by_role("link", name="Pricing").click()
    total = page.locator("#quote-total")
    expect(total).to_have_text(re.compile(r"\$[\d,]+\.\d\d"))
    first_total = total.inner_text()
    page.get_by_label("Task", exact=True).select_option("peg-insertion")
    page.get_by_label("Robot embodiment").select_option("franka-fr3")
    page.get_by_label("Hours of accepted data").fill("40")
    page.get_by_label("Distinct environments").fill("4")
    page.get_by_label("Wrist force/torque sensor").check()
    expect(total).not_to_have_text(first_total)
    expect(page.locator("#quote-lines tbody tr").first).to_be_visible()
    expect(page.locator("#quote-lines")).to_contain_text("force-torque")
    priced_total = total.inner_text()
    assert_every_control_is_labelled(page)
    shot(page, "04-price-calculator")

    # A specification that cannot be priced: the error shows next to its field
    page.get_by_label("Hours of accepted data").fill("1")
    expect(page.locator("#id_environments_error")).to_contain_text("at least 0.5 h")
    expect(page.locator("#quote-status")).to_contain_text("See the highlighted fields")
    shot(page, "05-price-calculator-error")
    page.get_by_label("Hours of accepted data").fill("40")
    expect(total).to_have_text(priced_total)

    # Wizard step 1 (prefilled from the calculator), step 2 (the quote), place the order
    page.get_by_role("button", name="Continue to order").click()
    expect(page).to_have_url(re.compile(r"/orders/new/\?"))
    expect(page.get_by_label("Hours of accepted data")).to_have_value("40")
    expect(total).to_have_text(priced_total)
    shot(page, "06-wizard-specification")
    page.get_by_role("button", name="Get quote").click()
    expect(page.get_by_role("heading", name="Your quote")).to_be_visible()
    quoted = page.locator("tfoot .quote-total").inner_text()
    assert quoted == priced_total  # the page and the live calculator: one money format
    page.get_by_label("Success criterion").fill("Peg fully seated")
    assert_every_control_is_labelled(page)
    shot(page, "07-wizard-quote")
    page.get_by_role("button", name="Place order").click()

    # The order page: status, payment pending, timeline, progress, coverage placeholder
    expect(page.locator("#order-status")).to_have_text("Awaiting payment")
    expect(page.get_by_text("Payment pending.")).to_be_visible()
    expect(page.locator("#timeline")).to_contain_text("Order created.")
    expect(page.locator("#timeline")).to_contain_text("awaiting payment")
    expect(
        page.get_by_role("progressbar", name="Accepted hours against ordered hours")
    ).to_have_attribute("aria-valuenow", "0")
    expect(page.locator("#coverage-chart rect")).to_have_count(4)
    shot(page, "08-order-awaiting-payment")
    page.set_viewport_size({"width": 390, "height": 844})  # a phone: one column
    shot(page, "08b-order-on-a-phone")
    page.set_viewport_size({"width": 1280, "height": 900})
    order = Order.objects.get(organization__name="Grasp Lab")
    assert page.url.endswith(f"/orders/{order.pk}/")
    assert order.success_criterion == "Peg fully seated"

    # Staff confirm the payment (the admin action's service); the customer sees it paid
    order_mark_paid(order_id=order.pk, actor_label="staff:test", reason="Bank transfer received.")
    page.reload()
    expect(page.locator("#order-status")).to_have_text("Paid")
    expect(page.locator("#timeline")).to_contain_text("Bank transfer received.")
    shot(page, "09-order-paid")

    # The order list shows it
    page.get_by_role("link", name="Orders", exact=True).click()
    expect(page.locator("#order-table")).to_contain_text(str(order.pk)[:8])
    shot(page, "10-orders")

    # API keys: created, shown once, then only the prefix
    page.get_by_role("link", name="API keys").click()
    page.get_by_label("Key name").fill("training pipeline")
    page.get_by_role("button", name="Create key").click()
    secret = page.locator("#new-key-value")
    expect(secret).to_have_value(re.compile(r"^mk_[0-9a-f]{10}_"))
    assert_every_control_is_labelled(page)
    shot(page, "11-api-keys")
    raw_key = secret.input_value()
    page.reload()
    expect(page.locator("#new-key-value")).to_have_count(0)
    assert raw_key not in page.content()


def test_a_customer_never_sees_another_customers_order(live_server, new_page):
    base = live_server.url
    # given: Ada orders
    ada = new_page()
    sign_up(ada, base, "ada", "Grasp Lab")
    ada.goto(base + "/orders/new/")
    ada.get_by_label("Hours of accepted data").fill("12")
    ada.get_by_role("button", name="Get quote").click()
    ada.get_by_role("button", name="Place order").click()
    expect(ada.locator("#order-status")).to_have_text("Awaiting payment")
    order_url = ada.url
    order_id = order_url.rstrip("/").rsplit("/", 1)[1]

    # when: Bob, in his own browser session, looks for it
    bob = new_page()
    sign_up(bob, base, "bob", "Bimanual Inc")
    response = bob.goto(order_url)

    # then
    assert response.status == 404
    expect(bob.get_by_role("heading", name="Page not found")).to_be_visible()
    shot(bob, "12-other-customers-order-404")
    bob.goto(base + "/orders/")
    expect(bob.get_by_text("No orders yet.")).to_be_visible()
    assert order_id[:8] not in bob.content()
    cancel = bob.request.post(order_url + "cancel/", fail_on_status_code=False)
    assert cancel.status == 403  # no CSRF token from another page: refused before anything else
    # with his own valid CSRF token, paying or cancelling her order finds nothing
    token = next(c["value"] for c in bob.context.cookies() if c["name"] == "csrftoken")
    for action in ("pay/", "cancel/"):
        response = bob.request.post(
            order_url + action, headers={"X-CSRFToken": token}, fail_on_status_code=False
        )
        assert response.status == 404, action
    assert Order.objects.get(pk=order_id).status == Order.Status.AWAITING_PAYMENT
    assert not Payment.objects.filter(order_id=order_id).exists()
    # and the fleet portal's earnings are not a customer's business
    assert bob.goto(base + "/fleet/earnings/").status == 403


# --- The fleet portal -----------------------------------------------------------------------------


def test_fleet_operator_registers_a_fleet_and_accepts_an_offer(live_server, new_page, eager_celery):
    from datetime import timedelta
    from decimal import Decimal

    from django.utils import timezone

    from fleets.models import Fleet, Job, Offer
    from fleets.services.planning import order_plan
    from marketplace.models import Organization
    from tests.factories import MembershipFactory, OrderFactory, OrganizationFactory, UserFactory

    base = live_server.url
    operator = OrganizationFactory(kind=Organization.Kind.FLEET_OPERATOR, name="Teleop Bay")
    user = UserFactory(username="otto")
    MembershipFactory(user=user, organization=operator)

    # Log in from the fleet portal's address, and land back on it
    page = new_page()
    page.goto(base + "/fleet/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/fleet/"))
    page.get_by_label("Username").fill("otto")
    page.get_by_label("Password").fill("pw-for-tests-123")
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/fleet/$"))
    expect(page.get_by_text("No fleet registered yet.")).to_be_visible()
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link", name="Offers")).to_be_visible()
    expect(nav.get_by_role("link", name="Orders")).to_have_count(0)
    shot(page, "20-fleet-empty")

    # Register a fleet: a refused time zone shows next to its field first
    page.get_by_role("link", name="Register your first fleet").click()
    page.get_by_label("Fleet name").fill("Bay 4")
    page.get_by_label("Time zone").fill("Mars/Olympus")
    page.get_by_label("Weekly capacity (hours)").fill("60")
    page.get_by_label("Payout rate per accepted hour").fill("40")
    assert_every_control_is_labelled(page)
    page.get_by_role("button", name="Register fleet").click()
    expect(page.locator("#id_timezone_error")).to_contain_text("Unknown time zone")
    expect(page.get_by_label("Time zone")).to_have_attribute("aria-invalid", "true")
    shot(page, "21-fleet-form-error")
    page.get_by_label("Time zone").fill("Europe/Berlin")
    page.get_by_role("button", name="Register fleet").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Bay 4")
    expect(page.get_by_text("No sites yet.")).to_be_visible()

    # A site, then a robot at it
    page.get_by_role("link", name="Add your first site").click()
    page.get_by_label("Site name").fill("Assembly bench")
    page.get_by_label("Kind of environment").select_option("lab_bench")
    page.get_by_label("Objects available").fill("peg\nconnector")
    assert_every_control_is_labelled(page)
    shot(page, "22-site-form")
    page.get_by_role("button", name="Add site").click()
    expect(page.locator("#site-table")).to_contain_text("Assembly bench")
    page.get_by_role("link", name="Add your first robot").click()
    page.get_by_label("Robot name").fill("Arm 1")
    page.get_by_label("Site", exact=True).select_option(label="Assembly bench (Lab bench)")
    page.get_by_label("Embodiment").select_option("franka-fr3")
    page.get_by_label("End effector").select_option("parallel_gripper")
    assert_every_control_is_labelled(page)
    shot(page, "23-robot-form")
    page.get_by_role("button", name="Add robot").click()
    expect(page.locator("#robot-table")).to_contain_text("Arm 1")
    shot(page, "24-fleet-detail")
    fleet = Fleet.objects.get(organization=operator)

    # No offers yet: the designed empty state
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Offers").click()
    expect(page.get_by_text("No offers waiting.")).to_be_visible()
    shot(page, "25-offers-empty")

    # A customer's paid order is planned and dispatched: the offer arrives with a countdown
    order = OrderFactory(status="paid", hours=Decimal("2"), environments=1)
    order_plan(order_id=order.pk)
    offer = Offer.objects.get(job__order=order)
    assert offer.fleet_id == fleet.pk
    page.reload()
    card = page.locator(f"#offer-{offer.pk}")
    expect(card).to_contain_text("Peg-in-hole insertion")
    countdown = card.locator("[data-countdown-for]")
    expect(countdown).to_have_text(re.compile(r"^\d+ min \d+ s left$"))
    first = countdown.inner_text()
    expect(countdown).not_to_have_text(first)  # it ticks
    assert_every_control_is_labelled(page)
    shot(page, "26-offers-inbox")

    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    shot(page, "26b-offers-inbox-on-a-phone")
    page.set_viewport_size({"width": 1280, "height": 900})

    # Accept, by keyboard: the job page, assigned, with its progress bars and timeline
    card.get_by_role("button", name=re.compile("^Accept")).focus()
    page.keyboard.press("Enter")
    expect(page.locator("#job-status")).to_have_text("Assigned")
    expect(page.get_by_text("Offer accepted: the job is yours.")).to_be_visible()
    expect(page.locator("#job-timeline")).to_contain_text("Offer accepted.")
    expect(page.get_by_role("progressbar", name="QA-accepted hours")).to_have_attribute(
        "aria-valuenow", "0"
    )
    shot(page, "27-job-detail")
    job = Job.objects.get(order=order)
    assert job.status == Job.Status.ASSIGNED and job.fleet_id == fleet.pk
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    expect(page.locator("#job-table")).to_contain_text("Peg-in-hole insertion #1")
    shot(page, "28-jobs")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Offers").click()
    expect(page.locator("#recent-offers")).to_contain_text("Accepted")

    # An offer running out: the countdown says so, and the server refuses a late accept
    late_order = OrderFactory(status="paid", hours=Decimal("2"), environments=1)
    order_plan(order_id=late_order.pk)
    late = Offer.objects.get(job__order=late_order)
    Offer.objects.filter(pk=late.pk).update(expires_at=timezone.now() + timedelta(seconds=3))
    page.reload()
    late_card = page.locator(f"#offer-{late.pk}")
    expect(late_card.locator("[data-countdown-for]")).to_have_text("Expired")
    shot(page, "26c-offer-expired")
    late_card.get_by_role("button", name=re.compile("^Accept")).click()
    expect(page.get_by_role("alert")).to_contain_text("This offer has expired.")
    late.refresh_from_db()
    assert late.status == Offer.Status.PENDING  # the sweeper expires it, not the page
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Fleets").click()
    expect(page.locator("#fleet-table")).to_contain_text("Bay 4")
    shot(page, "29-fleets")
