from django.urls import path

from billing import api

urlpatterns = [
    path("payments", api.PaymentList.as_view(), name="payment-list"),
    path("orders/<uuid:pk>/payments", api.OrderPayments.as_view(), name="order-payments"),
]
