"""The project's URLs plus /bench/bare: the cheapest DRF endpoint, as a yardstick."""

from django.urls import include, path
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView


class BareSerializer(serializers.Serializer):
    hours = serializers.DecimalField(max_digits=9, decimal_places=2)


class BareView(APIView):
    """Same parser, renderer, auth classes and one-field validation; no database, no pricing."""

    permission_classes = [AllowAny]

    def post(self, request):
        serializer = BareSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        return Response({"ok": True}, status=201)


urlpatterns = [
    path("bench/bare", BareView.as_view()),
    path("", include("marketplace.urls")),
]
