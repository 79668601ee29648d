"""The project's URLs, the one place that wires them: the web portal (portal.urls), the REST
API under /api/v1/ with its schema and docs, the Stripe webhook, probes and the admin."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import (
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)

from billing import views as billing_views
from datasets import urls as datasets_urls
from marketplace import api as accounts_api
from marketplace import health
from marketplace.exception_handler import handler_404_api, handler_500_api

api_v1 = [
    # the hottest routes first (quotes, orders): no other pattern here matches their paths
    path("", include("orders.urls")),
    path("me", accounts_api.Me.as_view(), name="me"),
    path("api-keys", accounts_api.ApiKeyListCreate.as_view(), name="api-key-list"),
    path(
        "organization/webhook",
        accounts_api.OrganizationWebhook.as_view(),
        name="organization-webhook",
    ),
    path("api-keys/<uuid:pk>/revoke", accounts_api.ApiKeyRevoke.as_view(), name="api-key-revoke"),
    path("", include("billing.urls")),
    path("fleet/", include("fleets.urls")),
    path("fleet/", include(datasets_urls.fleet_urlpatterns)),
    path("", include(datasets_urls.urlpatterns)),
]

urlpatterns = [
    # The API first: every request walks this list in order, and an API call used to try all
    # the portal's patterns before reaching its own (no page lives under api/, so the order
    # changes no route).
    path("api/v1/", include(api_v1)),
    path("", include("portal.urls")),  # every web page (server-rendered; the same services)
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("billing/stripe/webhook/", billing_views.stripe_webhook, name="stripe-webhook"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path(
        "api/redoc/",
        SpectacularRedocView.as_view(url_name="schema", template_name="portal/api/redoc.html"),
        name="api-redoc",
    ),
]


def handler404(request, exception=None):
    if request.path.startswith("/api/"):
        return handler_404_api(request, exception)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def handler500(request):
    if request.path.startswith("/api/"):
        return handler_500_api(request)
    from django.views.defaults import server_error

    return server_error(request)
