"""Billing's web pages, included at the site root by marketplace/urls.py."""

from django.urls import path

from billing import web

urlpatterns = [
    path("orders/<uuid:pk>/pay/", web.order_pay_page, name="order-pay-page"),
    path("fleet/earnings/", web.fleet_earnings_page, name="fleet-earnings-page"),
]
