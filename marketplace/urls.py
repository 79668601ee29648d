from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from billing import views as billing_views
from datasets import urls as datasets_urls
from marketplace import api as accounts_api
from marketplace import health, views
from marketplace.exception_handler import handler_404_api, handler_500_api
from orders import views as order_views

api_v1 = [
    path("me", accounts_api.Me.as_view(), name="me"),
    path("api-keys", accounts_api.ApiKeyListCreate.as_view(), name="api-key-list"),
    path(
        "organization/webhook",
        accounts_api.OrganizationWebhook.as_view(),
        name="organization-webhook",
    ),
    path("api-keys/<uuid:pk>/revoke", accounts_api.ApiKeyRevoke.as_view(), name="api-key-revoke"),
    path("", include("orders.urls")),
    path("", include("billing.urls")),
    path("fleet/", include("fleets.urls")),
    path("fleet/", include(datasets_urls.fleet_urlpatterns)),
    path("", include(datasets_urls.urlpatterns)),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Web portal (server-rendered pages; the same services as the API)
    path("signup/", views.signup, name="signup"),
    path("account/api-keys/", views.api_keys, name="api-keys"),
    path("account/api-keys/<uuid:pk>/revoke/", views.api_key_revoke, name="api-key-revoke-page"),
    path("catalog/", order_views.catalog, name="catalog"),
    path("pricing/", order_views.price_calculator, name="pricing"),
    path("orders/", order_views.order_list_page, name="order-list-page"),
    path("orders/new/", order_views.order_new, name="order-new"),
    path("orders/new/<uuid:quote_id>/", order_views.order_new_quote, name="order-new-quote"),
    path("orders/<uuid:pk>/", order_views.order_detail, name="order-detail-page"),
    path("orders/<uuid:pk>/cancel/", order_views.order_cancel, name="order-cancel-page"),
    path("", include("datasets.web_urls")),
    path("fleet/", include("fleets.web_urls")),
    path("", include("billing.web_urls")),  # pay an order (Checkout); fleet earnings
    path("admin/", admin.site.urls),
    path("billing/stripe/webhook/", billing_views.stripe_webhook, name="stripe-webhook"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
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
