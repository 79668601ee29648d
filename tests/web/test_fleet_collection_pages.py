"""The fleet portal's collection-plan pages (issue 30): a site's objects and scenes (listed,
added through fleets.services.collection with refusals next to their fields, deactivated),
a robot's calibrations (read-only, newest in force, age). Another operator's rows are 404;
members without a managing role only read."""

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from fleets.models import CameraCalibration, Scene, SiteObject
from marketplace.models import Membership, Organization
from tests.factories import SiteFactory
from tests.web.fleet_helpers import operator_fleet

pytestmark = pytest.mark.django_db
IDENTITY = [[1.0, 0, 0, 0], [0, 1.0, 0, 0], [0, 0, 1.0, 0], [0, 0, 0, 1.0]]


def field_error(html: str, field: str) -> str:
    match = re.search(rf'<div class="field-error" id="id_{field}_error">(.*?)</div>', html, re.S)
    assert match, f"no error slot for {field}"
    return re.sub(r"<[^>]+>", " ", match.group(1)).strip()


def calibrate(robot, camera, days_ago: float) -> CameraCalibration:
    return CameraCalibration.objects.create(
        fleet=robot.fleet,
        robot=robot,
        camera=camera,
        calibrated_at=timezone.now() - timedelta(days=days_ago),
        width=1280,
        height=720,
        fx=900,
        fy=901,
        cx=640,
        cy=360,
        distortion_model="plumb_bob",
        distortion_coefficients=[0, 0, 0, 0, 0],
        extrinsics=IDENTITY,
    )


def test_an_operator_adds_and_deactivates_objects_and_scenes(fleet_operator, fleet_client):
    fleet, site, _robot = operator_fleet(fleet_operator.organization)
    url = reverse("site-collection-page", kwargs={"pk": site.pk})
    detail = fleet_client.get(reverse("fleet-detail-page", kwargs={"pk": fleet.pk}))
    assert url in detail.content.decode()
    empty = fleet_client.get(url).content.decode()
    assert 'id="objects-empty"' in empty and 'id="scenes-empty"' in empty

    response = fleet_client.post(
        url,
        {
            "action": "add_object",
            "object-name": " blue mug ",
            "object-category": "Mug",
            "object-size_class": "small",
            "object-photo_url": "https://img.example.com/mug.jpg",
        },
    )
    assert response.status_code == 302
    mug = SiteObject.objects.get(site=site)
    assert (mug.name, mug.category, mug.size_class, mug.fleet_id) == (
        "blue mug",
        "mug",
        "small",
        fleet.pk,
    )
    response = fleet_client.post(
        url, {"action": "add_scene", "scene-name": "bench-left", "scene-lighting": "LED panel"}
    )
    assert response.status_code == 302
    scene = Scene.objects.get(site=site)
    assert scene.lighting == "LED panel" and scene.active

    html = fleet_client.get(url).content.decode()
    assert "blue mug" in html and "bench-left" in html and "LED panel" in html

    # deactivate both
    fleet_client.post(url, {"action": "object_active", "id": str(mug.pk), "active": "0"})
    fleet_client.post(url, {"action": "scene_active", "id": str(scene.pk), "active": "0"})
    mug.refresh_from_db()
    scene.refresh_from_db()
    assert not mug.active and not scene.active
    assert "Reactivate" in fleet_client.get(url).content.decode()


def test_the_services_refusals_show_next_to_their_fields(fleet_operator, fleet_client):
    _fleet, site, _robot = operator_fleet(fleet_operator.organization)
    SiteObject.objects.create(fleet=site.fleet, site=site, name="sponge")
    url = reverse("site-collection-page", kwargs={"pk": site.pk})
    response = fleet_client.post(url, {"action": "add_object", "object-name": "sponge"})
    assert response.status_code == 200
    assert "already has an object named" in field_error(response.content.decode(), "object-name")
    response = fleet_client.post(
        url,
        {"action": "add_object", "object-name": "cup", "object-photo_url": "ftp://x.example/c"},
    )
    assert "http or https" in field_error(response.content.decode(), "object-photo_url")
    later = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%d %H:%M")
    response = fleet_client.post(
        url, {"action": "add_scene", "scene-name": "s", "scene-arranged_at": later}
    )
    assert "future" in field_error(response.content.decode(), "scene-arranged_at")
    assert SiteObject.objects.count() == 1 and not Scene.objects.exists()


def test_another_operators_site_rows_and_robot_are_404(fleet_operator, make_tenant):
    _fleet, site, robot = operator_fleet(fleet_operator.organization)
    theirs = SiteObject.objects.create(fleet=site.fleet, site=site, name="mug")
    other = make_tenant(Organization.Kind.FLEET_OPERATOR)
    _other_fleet, other_site, _ = operator_fleet(other.organization)
    client = Client()
    client.force_login(other.user)
    url = reverse("site-collection-page", kwargs={"pk": site.pk})
    assert client.get(url).status_code == 404
    assert client.post(url, {"action": "object_active", "id": str(theirs.pk)}).status_code == 404
    # nor through their own site's page: the row must be of the page's site
    own_url = reverse("site-collection-page", kwargs={"pk": other_site.pk})
    response = client.post(own_url, {"action": "object_active", "id": str(theirs.pk)})
    assert response.status_code == 404
    assert client.post(own_url, {"action": "object_active", "id": "nope"}).status_code == 404
    calibrations = reverse("robot-calibrations-page", kwargs={"pk": robot.pk})
    assert client.get(calibrations).status_code == 404
    theirs.refresh_from_db()
    assert theirs.active


def test_members_without_a_managing_role_only_read(make_tenant):
    tenant = make_tenant(Organization.Kind.FLEET_OPERATOR, Membership.Role.BILLING)
    _fleet, site, _robot = operator_fleet(tenant.organization)
    client = Client()
    client.force_login(tenant.user)
    url = reverse("site-collection-page", kwargs={"pk": site.pk})
    page = client.get(url)
    assert page.status_code == 200 and 'id="object-form"' not in page.content.decode()
    response = client.post(url, {"action": "add_object", "object-name": "mug"})
    assert response.status_code == 403
    assert not SiteObject.objects.exists()


def test_the_forms_need_the_csrf_token(fleet_operator):
    _fleet, site, _robot = operator_fleet(fleet_operator.organization)
    client = Client(enforce_csrf_checks=True)
    client.force_login(fleet_operator.user)
    url = reverse("site-collection-page", kwargs={"pk": site.pk})
    assert client.post(url, {"action": "add_object", "object-name": "mug"}).status_code == 403
    assert not SiteObject.objects.exists()


def test_a_robots_calibrations_show_which_is_in_force_and_their_age(
    fleet_operator, fleet_client, settings
):
    settings.CALIBRATION_MAX_AGE_DAYS = 30
    fleet, _site, robot = operator_fleet(fleet_operator.organization)
    url = reverse("robot-calibrations-page", kwargs={"pk": robot.pk})
    assert (
        url
        in fleet_client.get(reverse("fleet-detail-page", kwargs={"pk": fleet.pk})).content.decode()
    )
    assert 'id="calibrations-empty"' in fleet_client.get(url).content.decode()
    old = calibrate(robot, "wrist", days_ago=45)
    current = calibrate(robot, "wrist", days_ago=3)
    ahead = calibrate(robot, "wrist", days_ago=-0.002)  # a few minutes ahead: not yet
    scene = calibrate(robot, "scene", days_ago=0.1)
    html = fleet_client.get(url).content.decode()

    def row(calibration) -> str:
        match = re.search(rf'<tr id="calibration-{calibration.pk}">(.*?)</tr>', html, re.S)
        assert match
        return match.group(1)

    assert "In force" in row(current) and "3 days" in row(current)
    assert "superseded" in row(old) and "older than 30 days" in row(old)
    assert "not yet in force" in row(ahead)
    assert "In force" in row(scene) and "today" in row(scene)
    assert "1280\u00d7720" in row(scene)


def test_the_calibrations_page_shows_only_the_newest_and_says_so(
    fleet_operator, fleet_client, monkeypatch
):
    from portal.views import fleet_collection

    monkeypatch.setattr(fleet_collection, "CALIBRATIONS_SHOWN", 3)
    _fleet, _site, robot = operator_fleet(fleet_operator.organization)
    scene = calibrate(robot, "scene", days_ago=10)  # in force, though not among the newest 3
    wrist = [calibrate(robot, "wrist", days_ago=days) for days in (4, 3, 2, 1)]
    html = fleet_client.get(reverse("robot-calibrations-page", kwargs={"pk": robot.pk}))
    html = html.content.decode()
    shown = set(re.findall(r'<tr id="calibration-([0-9a-f-]+)">', html))
    assert shown == {str(c.pk) for c in wrist[1:]}
    assert 'id="calibrations-more"' in html
    assert str(scene.pk) not in shown
    assert html.count("In force") == 1  # the newest wrist one; the scene's is not listed


def test_a_row_is_changed_only_on_its_own_sites_page(fleet_operator, fleet_client):
    fleet, site, _robot = operator_fleet(fleet_operator.organization)
    mug = SiteObject.objects.create(fleet=fleet, site=site, name="mug")
    elsewhere = SiteFactory(fleet=fleet)
    url = reverse("site-collection-page", kwargs={"pk": elsewhere.pk})
    response = fleet_client.post(url, {"action": "object_active", "id": str(mug.pk), "active": "0"})
    assert response.status_code == 404
    mug.refresh_from_db()
    assert mug.active
