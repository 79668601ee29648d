"""Reads of the collection plan's registry (issue 30) shared by the fleet API and the portal:
each scoped to the caller's organization (another operator's rows do not exist for it)."""

from datetime import datetime

from django.db.models import QuerySet

from fleets.models import CameraCalibration, Scene, SiteObject
from marketplace.models import Organization


def site_objects_for(*, organization: Organization) -> QuerySet[SiteObject]:
    return SiteObject.objects.filter(site__fleet__organization=organization)


def scenes_for(*, organization: Organization) -> QuerySet[Scene]:
    return Scene.objects.filter(site__fleet__organization=organization)


def calibrations_for(*, organization: Organization) -> QuerySet[CameraCalibration]:
    return CameraCalibration.objects.filter(robot__fleet__organization=organization)


def calibrations_in_force(*, robot_id, at: datetime) -> QuerySet[CameraCalibration]:
    """The robot's calibration in force per camera at `at`: its newest made by then."""
    return (
        CameraCalibration.objects.filter(robot_id=robot_id, calibrated_at__lte=at)
        .order_by("camera", "-calibrated_at", "-created_at")
        .distinct("camera")
    )
