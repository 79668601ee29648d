# ruff: noqa: F811  (the browser fixtures are imported from test_browser)
"""Issue 15's "customers see the data" in a real browser: on an accepted episode's page the
poster frame is shown (a decoded image, not a broken icon), the clip plays (its time moves)
through the audited link, and the state/action plot is drawn."""

import pytest

from datasets.models import EpisodeMediaEvent
from tests.web.test_browser import (  # noqa: F401  (fixtures)
    NEEDS_CHROMIUM,
    browser,
    new_page,
    shot,
)
from tests.web.test_browser_portals import log_in
from tests.web.test_episode_media import accepted_episode

playwright_sync = pytest.importorskip("playwright.sync_api")
expect = playwright_sync.expect

pytestmark = [
    NEEDS_CHROMIUM,
    pytest.mark.xdist_group("browser"),  # one Chromium at a time (tests/README.md)
    pytest.mark.django_db(transaction=True),
]


def test_the_poster_is_shown_and_the_clip_plays(live_server, new_page, s3, customer):
    episode, _ = accepted_episode(customer.organization)
    page = new_page()
    path = f"/orders/{episode.order_id}/episodes/{episode.pk}/"
    log_in(page, live_server.url, customer.user.username, path)

    video = page.locator("video[data-camera]").first
    expect(video).to_be_visible()
    poster = page.evaluate(
        """async (url) => { const img = new Image(); img.src = url; await img.decode();
            return [img.naturalWidth, img.naturalHeight]; }""",
        video.get_attribute("poster"),
    )
    assert poster == [64, 48]
    assert EpisodeMediaEvent.objects.count() == 0  # preload="none": no link before a play

    played = page.evaluate(
        """async () => { const v = document.querySelector('video[data-camera]');
            v.muted = true; await v.play();
            await new Promise(r => setTimeout(r, 700));
            return [v.currentTime, v.readyState, v.videoWidth, v.error && v.error.code]; }"""
    )
    assert played[0] > 0.1 and played[1] >= 2 and played[2] == 64 and played[3] is None, played
    assert EpisodeMediaEvent.objects.filter(episode=episode).count() >= 1
    expect(page.locator("svg.episode-plot polyline")).to_have_count(16)
    shot(page, "90-episode-media")
