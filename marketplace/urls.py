from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from marketplace import api as accounts_api
from marketplace import views
from marketplace.exception_handler import handler_404_api, handler_500_api

api_v1 = [
    path("me", accounts_api.Me.as_view(), name="me"),
    path("api-keys", accounts_api.ApiKeyListCreate.as_view(), name="api-key-list"),
    path("api-keys/<uuid:pk>/revoke", accounts_api.ApiKeyRevoke.as_view(), name="api-key-revoke"),
    path("", include("orders.urls")),
    path("fleet/", include("fleets.urls")),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
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
