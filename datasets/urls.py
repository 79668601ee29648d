from django.urls import path

from datasets import (
    api,
    api_claims,
    api_deliveries,
    api_downloads,
    api_exclusions,
    api_operators,
)

# Mounted under /api/v1/fleet/ (fleet-operator keys).
fleet_urlpatterns = [
    path(
        "jobs/<uuid:job_id>/episodes", api.JobEpisodeListCreate.as_view(), name="fleet-episode-list"
    ),
    path("episodes/<uuid:pk>", api.EpisodeDetail.as_view(), name="fleet-episode-detail"),
    path(
        "episodes/<uuid:pk>/upload", api.EpisodeRenewUpload.as_view(), name="fleet-episode-upload"
    ),
    path(
        "episodes/<uuid:pk>/complete", api.EpisodeComplete.as_view(), name="fleet-episode-complete"
    ),
    path(
        "operator-figures",
        api_operators.FleetOperatorFigures.as_view(),
        name="fleet-operator-figures",
    ),
    path("disputes", api_claims.FleetDisputeList.as_view(), name="fleet-dispute-list"),
    path("disputes/<uuid:pk>", api_claims.FleetDisputeDetail.as_view(), name="fleet-dispute"),
    path(
        "disputes/<uuid:pk>/answer",
        api_claims.FleetDisputeAnswer.as_view(),
        name="fleet-dispute-answer",
    ),
]

# Mounted under /api/v1/ (customer keys).
urlpatterns = [
    path("orders/<uuid:pk>/coverage", api.OrderCoverage.as_view(), name="order-coverage"),
    path("orders/<uuid:pk>/episodes", api.OrderEpisodeList.as_view(), name="order-episodes"),
    path(
        "orders/<uuid:pk>/operators",
        api_operators.OrderOperatorFigures.as_view(),
        name="order-operator-figures",
    ),
    path(
        "orders/<uuid:pk>/deliveries",
        api_deliveries.OrderDeliveryList.as_view(),
        name="order-delivery-list",
    ),
    path(
        "orders/<uuid:pk>/exclusions",
        api_exclusions.OrderExclusions.as_view(),
        name="order-exclusions",
    ),
    path("deliveries/<uuid:pk>", api_deliveries.DeliveryDetail.as_view(), name="delivery-detail"),
    path(
        "deliveries/<uuid:pk>/files",
        api_deliveries.DeliveryFileList.as_view(),
        name="delivery-files",
    ),
    path(
        "deliveries/<uuid:pk>/download",
        api_deliveries.DeliveryDownload.as_view(),
        name="delivery-download",
    ),
    path(
        "deliveries/<uuid:pk>/links",
        api_downloads.DeliveryDownloadLinks.as_view(),
        name="delivery-download-links",
    ),
    path(
        "deliveries/<uuid:pk>/claims",
        api_claims.DeliveryClaimCreate.as_view(),
        name="delivery-claim-create",
    ),
    path("orders/<uuid:pk>/claims", api_claims.OrderClaimList.as_view(), name="order-claims"),
    path("claims/<uuid:pk>", api_claims.ClaimDetail.as_view(), name="claim-detail"),
    path(
        "deliveries/<uuid:pk>/revoke",
        api_deliveries.DeliveryRevoke.as_view(),
        name="delivery-revoke",
    ),
    path(
        "deliveries/<uuid:pk>/approve",
        api_deliveries.PilotApprove.as_view(),
        name="delivery-approve",
    ),
    path(
        "deliveries/<uuid:pk>/reject", api_deliveries.PilotReject.as_view(), name="delivery-reject"
    ),
]
