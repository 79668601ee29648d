"""The whole story in a real browser (Playwright on Debian's Chromium, the live test server):
a customer signs up, prices and places an order in the wizard, pays on the Checkout page
(the local Checkout fake in front of localstripe, which sends a signed webhook), and sees it
paid; a fleet operator, in a second browser context, accepts the offer; episodes are uploaded
to the local S3 server and pass QA; the customer watches the progress bar and the coverage
chart move, and after delivery downloads files through the audited, signed S3 links.
Screenshots of each main page go to test-artifacts/screenshots/."""

import hashlib
import json
import re
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from billing.models import FleetPayable, Payment
from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Delivery, DownloadEvent, Episode
from fleet_agent.cameras import render_camera_videos
from fleet_agent.uploads import declarations
from fleets.models import Job, Offer, SiteObject
from marketplace import services as accounts
from marketplace.models import Organization
from orders.models import Order
from orders.money import format_money
from tests.billing.conftest import API_KEY, WEBHOOK_SECRET, localstripe_url  # noqa: F401
from tests.billing.fake_checkout import FakeCheckout
from tests.datasets.helpers import frames_in, put
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory
from tests.web.fleet_helpers import operator_fleet
from tests.web.test_browser import (  # noqa: F401  (fixtures)
    NEEDS_CHROMIUM,
    assert_every_control_is_labelled,
    browser,
    new_page,
    shot,
    sign_up,
)

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

pytestmark = [
    NEEDS_CHROMIUM,
    pytest.mark.xdist_group("browser"),  # one Chromium at a time (tests/README.md)
    pytest.mark.django_db(transaction=True),
]

EPISODE_FPS = 2  # an hour of episodes with a camera video each: few frames keep it quick


@pytest.fixture
def story_services(settings, s3, localstripe_url, live_server, eager_celery):  # noqa: F811
    """Stripe through the Checkout fake (webhooks to the live server), S3, eager Celery."""
    checkout = FakeCheckout(
        localstripe_url,
        webhook_url=live_server.url + "/billing/stripe/webhook/",
        webhook_secret=WEBHOOK_SECRET,
    )
    settings.STRIPE_API_KEY = API_KEY
    settings.STRIPE_API_BASE = checkout.url
    settings.STRIPE_WEBHOOK_SECRET = WEBHOOK_SECRET
    settings.STRIPE_MAX_NETWORK_RETRIES = 0
    settings.STRIPE_TIMEOUT_SECONDS = 10
    settings.BILLING_CHECKOUT_SUCCESS_URL = live_server.url + "/orders/{order_id}/?payment=success"
    settings.BILLING_CHECKOUT_CANCEL_URL = live_server.url + "/orders/{order_id}/?payment=cancelled"
    # eager_celery: webhook processing, dispatch, QA and assembly run where they are enqueued
    # (the live server's thread or the test's), each after its transaction commits.
    yield checkout
    checkout.close()


def upload(client: APIClient, job: Job, site, robot, seconds: int, seed: int) -> Episode:
    """What the fleet agent does: register the parquet and one video per camera the order
    asks for (rendered from the trajectory, as the agent renders them), PUT each to its
    presigned S3 URL, complete (QA runs)."""
    columns = episode_table(frames=seconds * EPISODE_FPS, fps=EPISODE_FPS, seed=seed)
    data = parquet_bytes(columns)
    spec = job.order.stream_spec
    videos = render_camera_videos(
        {"observation.state": columns["observation.state"]},
        spec.get("cameras", []),
        EPISODE_FPS,
        codec=spec.get("video_codec", "h264"),
        seed=seed,
    )
    registered = client.post(
        f"/api/v1/fleet/jobs/{job.id}/episodes",
        {
            "site": str(site.id),
            "robot": str(robot.id),
            "operator": "op-3",
            "task_instruction": "insert the peg",
            "success": True,
            "fps": EPISODE_FPS,
            "size_bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "frames": frames_in(data),
            "objects_handled": ["peg-8mm"],
            "videos": declarations(videos),
        },
        format="json",
    )
    assert registered.status_code == 201, registered.json()
    body = registered.json()
    assert put(body["upload"], data) == 200
    assert sorted(video["camera_key"] for video in body["upload"]["videos"]) == sorted(videos)
    for video in body["upload"]["videos"]:
        assert put(video, videos[video["camera_key"]]) == 200
    completed = client.post(f"/api/v1/fleet/episodes/{body['id']}/complete", {}, format="json")
    assert completed.status_code == 200, completed.json()
    return Episode.objects.get(pk=body["id"])


def download(page, link_name: str) -> bytes:
    """Click a delivery's download link: the audited endpoint redirects to a signed S3 GET."""
    with page.expect_download() as event:
        page.get_by_role("link", name=link_name, exact=True).click()
    download = event.value
    assert "X-Amz-Signature=" in download.url and "X-Amz-Expires=" in download.url
    with open(download.path(), "rb") as file:
        return file.read()


def test_order_pay_collect_and_download_in_the_browser(live_server, new_page, story_services):  # noqa: F811
    base = live_server.url
    checkout = story_services
    # A fleet operator with a fleet able to do the job (robot, site) and an API key for its agent
    operator = OrganizationFactory(kind=Organization.Kind.FLEET_OPERATOR, name="Teleop Bay")
    MembershipFactory(user=UserFactory(username="otto"), organization=operator)
    fleet, site, robot = operator_fleet(operator, name="Bay 4")
    # the object its episodes name: an order's collection plan is dispatched to sites that
    # offer enough registered objects, and QA counts each episode in its object's cell
    SiteObject.objects.create(fleet=fleet, site=site, name="peg-8mm", category="peg")
    agent = APIClient()
    agent.credentials(
        HTTP_AUTHORIZATION="Bearer "
        + accounts.api_key_create(organization=operator, name="fleet agent").raw_key
    )

    # --- The customer: sign up, specify, quote, place the order
    customer = new_page()
    sign_up(customer, base, "carla", "Contact Robotics")
    customer.get_by_role("link", name="New order").first.click()
    customer.get_by_label("Task", exact=True).select_option("peg-insertion")
    customer.get_by_label("Robot embodiment").select_option("franka-fr3")
    customer.get_by_label("Hours of accepted data").fill("1")
    customer.get_by_label("Distinct environments").fill("1")
    expect(customer.locator("#quote-total")).to_have_text(re.compile(r"\$[\d,]+\.\d\d"))
    assert_every_control_is_labelled(customer)
    shot(customer, "40-story-wizard")
    customer.get_by_role("button", name="Get quote").click()
    expect(customer.get_by_role("heading", name="Your quote")).to_be_visible()
    customer.get_by_role("button", name="Place order").click()
    expect(customer.locator("#order-status")).to_have_text("Awaiting payment")
    order = Order.objects.get(organization__name="Contact Robotics")
    order_url = f"{base}/orders/{order.pk}/"

    # --- Pay on the Checkout page
    pay = customer.get_by_role("button", name="Pay with card")
    expect(pay).to_be_visible()
    shot(customer, "41-story-order-awaiting-payment")
    pay.click()
    expect(customer).to_have_url(re.compile(re.escape(checkout.url) + r"/pay/cs_test_"))
    expect(customer.locator("#checkout-amount")).to_have_text(f"{order.total:,} USD")
    shot(customer, "42-story-checkout")
    customer.get_by_role("button", name=re.compile(r"^Pay ")).click()

    # Back on the order page: the signed webhook has paid it, and dispatch has offered the job
    expect(customer).to_have_url(order_url + "?payment=success")
    expect(customer.locator("#payment-confirmed")).to_contain_text("Payment confirmed.")
    expect(customer.locator("#payment-paid")).to_contain_text(
        f"Paid: {format_money(order.total, order.currency)} by card"
    )
    expect(customer.locator("#order-status")).to_have_text("In collection")
    expect(customer.locator("#timeline")).to_contain_text("Paid")
    shot(customer, "43-story-order-paid")
    assert checkout.webhook_responses == [200]
    assert Payment.objects.get(order=order).status == Payment.Status.SUCCEEDED
    offer = Offer.objects.get(job__order=order)
    assert offer.fleet_id == fleet.pk

    # --- The fleet operator, in a second browser context: the offer in the inbox, accepted
    operator_page = new_page()
    operator_page.goto(base + "/fleet/offers/")
    operator_page.get_by_label("Username").fill("otto")
    operator_page.get_by_label("Password").fill("pw-for-tests-123")
    operator_page.get_by_role("button", name="Log in").click()
    card = operator_page.locator(f"#offer-{offer.pk}")
    expect(card).to_contain_text("Peg-in-hole insertion")
    shot(operator_page, "44-story-fleet-inbox")
    card.get_by_role("button", name=re.compile("^Accept")).click()
    expect(operator_page.locator("#job-status")).to_have_text("Assigned")
    job = Job.objects.get(order=order)
    assert job.fleet_id == fleet.pk and job.target_hours == Decimal("1")

    # --- Episodes: a third of the hour passes QA; the customer sees progress and coverage
    progress = customer.get_by_role("progressbar", name="Accepted hours against ordered hours")
    customer.goto(order_url)
    expect(progress).to_have_attribute("aria-valuenow", "0")
    expect(customer.locator("#coverage-empty")).to_be_visible()
    first = upload(agent, job, site, robot, seconds=1200, seed=1)
    assert first.status == Episode.Status.ACCEPTED, first.qa_failures
    customer.reload()
    expect(progress).to_have_attribute("aria-valuenow", "33")
    expect(customer.locator("#progress-text")).to_contain_text("0.33 of 1 hours accepted")
    expect(customer.locator("#coverage-empty")).to_have_count(0)
    bar = customer.locator("#coverage-chart rect")
    expect(bar).to_have_count(1)
    assert float(bar.get_attribute("height")) > 0
    expect(bar.locator("title")).to_have_text(re.compile(r"^E1: 0\.33"))
    shot(customer, "45-story-progress")

    # --- The rest of the hour: the job completes, the dataset is assembled and delivered
    second = upload(agent, job, site, robot, seconds=2410, seed=2)  # the hour, and a frame
    assert second.status == Episode.Status.ACCEPTED, second.qa_failures
    order.refresh_from_db()
    assert order.status == Order.Status.DELIVERED
    delivery = Delivery.objects.get(order=order, kind=Delivery.Kind.FULL)
    assert delivery.status == Delivery.Status.READY
    customer.reload()
    expect(customer.locator("#order-status")).to_have_text("Delivered")
    expect(progress).to_have_attribute("aria-valuenow", "100")
    expect(customer.locator(f"#delivery-{delivery.pk}")).to_contain_text("2 episodes")
    shot(customer, "46-story-delivered")

    # --- Downloads: through the audited endpoint to signed S3 links; bytes match the manifest
    manifest = json.loads(download(customer, "manifest.json"))
    data_path = "data/chunk-000/file-000.parquet"
    data = download(customer, data_path)
    listed = {entry["path"]: entry for entry in manifest["files"]}
    assert len(data) == listed[data_path]["size"]
    assert hashlib.sha256(data).hexdigest() == listed[data_path]["sha256"]
    assert list(
        DownloadEvent.objects.filter(delivery=delivery)
        .order_by("created_at")
        .values_list("path", flat=True)
    ) == ["manifest.json", data_path]

    # --- An accepted episode's page: the camera's poster frame is shown, its clip plays
    customer.goto(f"{order_url}episodes/{first.pk}/")
    video = customer.locator("video[data-camera]").first
    expect(video).to_be_visible()
    poster = customer.evaluate(
        """async (url) => { const img = new Image(); img.src = url; await img.decode();
            return img.naturalWidth; }""",
        video.get_attribute("poster"),
    )
    assert poster >= 320  # the order's camera: 320x240 at least
    played = customer.evaluate(
        """async () => { const v = document.querySelector('video[data-camera]');
            v.muted = true; await v.play(); await new Promise(r => setTimeout(r, 1200));
            return [v.currentTime, v.readyState, v.error && v.error.code]; }"""
    )
    assert played[0] > 0.3 and played[1] >= 2 and played[2] is None, played
    expect(customer.locator("svg.episode-plot polyline").first).to_be_attached()
    shot(customer, "46b-story-episode-cameras")

    # --- The operator's earnings: the job's accepted hour at the fleet's rate, pending payout
    payable = FleetPayable.objects.get(job=job)
    operator_page.get_by_role("navigation", name="Main").get_by_role(
        "link", name="Earnings"
    ).click()
    expect(operator_page.locator(f"#payable-{payable.pk}")).to_contain_text(
        format_money(payable.amount, payable.currency)
    )
    expect(operator_page.locator(f"#payable-{payable.pk}")).to_contain_text("Pending")
    expect(operator_page.locator("#payouts-empty")).to_be_visible()
    shot(operator_page, "47-story-fleet-earnings")
