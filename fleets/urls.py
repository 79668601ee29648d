"""Fleet API, mounted at /api/v1/fleet/ (fleet-operator keys only)."""

from django.urls import path

from fleets import api, api_collection, api_operators

urlpatterns = [
    path("fleets", api.FleetListCreate.as_view(), name="fleet-list"),
    path("fleets/<uuid:pk>", api.FleetDetail.as_view(), name="fleet-detail"),
    path("fleets/<uuid:pk>/heartbeat", api.FleetHeartbeat.as_view(), name="fleet-heartbeat"),
    path(
        "fleets/<uuid:pk>/rotate-secret",
        api.FleetRotateSecret.as_view(),
        name="fleet-rotate-secret",
    ),
    path("sites", api.SiteListCreate.as_view(), name="fleet-site-list"),
    path("sites/<uuid:pk>", api.SiteDetail.as_view(), name="fleet-site-detail"),
    path("robots", api.RobotListCreate.as_view(), name="fleet-robot-list"),
    path("robots/<uuid:pk>", api.RobotDetail.as_view(), name="fleet-robot-detail"),
    path("operators", api_operators.OperatorListCreate.as_view(), name="fleet-operator-list"),
    path(
        "operators/<uuid:pk>", api_operators.OperatorDetail.as_view(), name="fleet-operator-detail"
    ),
    # the collection plan's registry (issue 30): objects and scenes of a site, calibrations
    path("objects", api_collection.SiteObjectListCreate.as_view(), name="fleet-object-list"),
    path(
        "objects/<uuid:pk>", api_collection.SiteObjectDetail.as_view(), name="fleet-object-detail"
    ),
    path("scenes", api_collection.SceneListCreate.as_view(), name="fleet-scene-list"),
    path("scenes/<uuid:pk>", api_collection.SceneDetail.as_view(), name="fleet-scene-detail"),
    path(
        "calibrations",
        api_collection.CalibrationListCreate.as_view(),
        name="fleet-calibration-list",
    ),
    path(
        "calibrations/<uuid:pk>",
        api_collection.CalibrationDetail.as_view(),
        name="fleet-calibration-detail",
    ),
    path("offers", api.OfferList.as_view(), name="fleet-offer-list"),
    path("offers/<uuid:pk>/accept", api.OfferAccept.as_view(), name="fleet-offer-accept"),
    path("offers/<uuid:pk>/decline", api.OfferDecline.as_view(), name="fleet-offer-decline"),
    path("jobs", api.AssignedJobList.as_view(), name="fleet-job-list"),
    path("jobs/open", api.OpenJobList.as_view(), name="fleet-open-job-list"),
    path("jobs/<uuid:pk>/bids", api.JobBid.as_view(), name="fleet-job-bid"),
    path("jobs/<uuid:pk>/progress", api.JobProgress.as_view(), name="fleet-job-progress"),
]
