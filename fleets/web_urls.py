"""Fleet operator web pages, included under /fleet/ by marketplace/urls.py."""

from django.urls import path

from fleets import views

urlpatterns = [
    path("", views.fleet_overview, name="fleet-overview-page"),
    path("fleets/new/", views.fleet_new, name="fleet-new-page"),
    path("fleets/<uuid:pk>/", views.fleet_detail, name="fleet-detail-page"),
    path("fleets/<uuid:pk>/edit/", views.fleet_edit, name="fleet-edit-page"),
    path("fleets/<uuid:pk>/sites/new/", views.site_new, name="site-new-page"),
    path("fleets/<uuid:pk>/robots/new/", views.robot_new, name="robot-new-page"),
    path("sites/<uuid:pk>/edit/", views.site_edit, name="site-edit-page"),
    path("robots/<uuid:pk>/edit/", views.robot_edit, name="robot-edit-page"),
    path("offers/", views.offer_list, name="offer-list-page"),
    path("offers/<uuid:pk>/accept/", views.offer_accept, name="offer-accept-page"),
    path("offers/<uuid:pk>/decline/", views.offer_decline, name="offer-decline-page"),
    path("jobs/", views.job_list, name="job-list-page"),
    path("jobs/<uuid:pk>/", views.job_detail, name="job-detail-page"),
]
