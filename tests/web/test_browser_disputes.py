# ruff: noqa: F811  (the browser fixtures are imported from test_browser)
"""Issue 28 in a real browser (Playwright on Debian's Chromium, the live test server): the
fleet answers a dispute on its page, then staff, on the decision page, see what the customer
downloaded and the fleet's answer, tick two episodes and record a partial grant with a note;
exactly those two are excluded. Screenshots go to test-artifacts/screenshots/."""

import pytest

from datasets.models import Dispute, EpisodeExclusion
from marketplace.models import User
from tests.web.dispute_helpers import disputed_order
from tests.web.test_browser import (  # noqa: F401  (fixtures)
    NEEDS_CHROMIUM,
    browser,
    new_page,
    shot,
)
from tests.web.test_browser_portals import PASSWORD, both_widths, log_in

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

pytestmark = [
    NEEDS_CHROMIUM,
    pytest.mark.xdist_group("browser"),  # one Chromium at a time (tests/README.md)
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("eager_celery"),
]


def test_the_fleet_answers_and_staff_grant_two_of_four(
    live_server, new_page, customer, fleet_operator
):
    disputed = disputed_order(customer.organization, fleet_operator.organization)
    dispute_id = disputed.dispute.id
    base = live_server.url

    # the fleet answers on its page
    fleet_page = new_page()
    log_in(fleet_page, base, fleet_operator.user.username, f"/fleet/disputes/{dispute_id}/")
    expect(fleet_page.locator("#dispute-items tbody tr")).to_have_count(4)
    widths = both_widths(fleet_page, "95-fleet-dispute")
    assert widths["desktop"] == widths["phone"] == 0, widths
    fleet_page.get_by_label("What staff should know").fill("Episodes 3 and 4 show the peg.")
    shot(fleet_page, "95-fleet-dispute-answering")
    fleet_page.get_by_role("button", name="Send the answer").click()
    expect(fleet_page.locator("#fleet-answer")).to_have_text("Episodes 3 and 4 show the peg.")
    assert Dispute.objects.get(pk=dispute_id).status == Dispute.Status.AWAITING_DECISION

    # staff decide on the decision page
    User.objects.create_user(username="stella", password=PASSWORD, is_staff=True)
    staff_page = new_page()
    log_in(staff_page, base, "stella", f"/staff/disputes/{dispute_id}/")
    expect(staff_page.locator("#download-audit tbody tr")).to_have_attribute("data-share", "1.00")
    expect(staff_page.locator("#fleet-answer")).to_have_text("Episodes 3 and 4 show the peg.")
    widths = both_widths(staff_page, "96-staff-dispute")
    assert widths["desktop"] == widths["phone"] == 0, widths
    granted = [str(e.id) for e in disputed.episodes[:2]]
    for episode_id in granted:
        staff_page.locator(f"#grant-{episode_id}").check()
    staff_page.get_by_label("Partly granted").check()
    staff_page.get_by_label("Note (required: why)").fill("The first two hold a cup, not a peg.")
    shot(staff_page, "96-staff-dispute-deciding")
    staff_page.get_by_role("button", name="Record the decision").click()
    expect(staff_page.locator("#dispute-decision")).to_have_text("partly granted")
    expect(staff_page.locator("#dispute-decision-form input[type=checkbox]")).to_have_count(0)

    excluded = sorted(str(e) for e in EpisodeExclusion.objects.values_list("episode_id", flat=True))
    assert excluded == sorted(granted)
    statuses = dict(disputed.claim.items.values_list("episode_id", "status"))
    assert sorted(str(e) for e, s in statuses.items() if s == "refused") == sorted(
        str(e.id) for e in disputed.episodes[2:]
    )
