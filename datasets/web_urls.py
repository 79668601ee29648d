from django.urls import path

from datasets import web

urlpatterns = [
    path(
        "deliveries/<uuid:pk>/download/", web.delivery_download_page, name="delivery-download-page"
    ),
    path("deliveries/<uuid:pk>/review/", web.pilot_review_page, name="pilot-review-page"),
    path("deliveries/<uuid:pk>/revoke/", web.delivery_revoke_page, name="delivery-revoke-page"),
]
