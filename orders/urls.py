from django.urls import path

from orders import api

urlpatterns = [
    # the hot endpoints first: every request walks this list in order
    path("quotes", api.QuoteCreate.as_view(), name="quote-create"),
    path("quotes/preview", api.QuotePreview.as_view(), name="quote-preview"),
    path("quotes/<uuid:pk>", api.QuoteDetail.as_view(), name="quote-detail"),
    path("orders", api.OrderListCreate.as_view(), name="order-list"),
    path("orders/<uuid:pk>", api.OrderDetail.as_view(), name="order-detail"),
    path("catalog/task-types", api.TaskTypeList.as_view(), name="task-type-list"),
    path(
        "catalog/complexity-levels", api.ComplexityLevelList.as_view(), name="complexity-level-list"
    ),
    path("catalog/embodiments", api.EmbodimentList.as_view(), name="embodiment-list"),
    path("catalog/sensors", api.SensorAddonList.as_view(), name="sensor-list"),
    path("catalog/rate-card", api.CurrentRateCard.as_view(), name="rate-card-current"),
    path("orders/<uuid:pk>/cancel", api.OrderCancel.as_view(), name="order-cancel"),
]
