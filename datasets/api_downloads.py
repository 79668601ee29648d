"""Signed links to many files of a delivery in one request (what `marketplace-download`
uses): one audited call instead of one per file. The one-file redirect is in api.py."""

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from datasets.api_customer import CustomerApi
from datasets.services.downloads import MAX_LINKS_PER_REQUEST, delivery_download_links
from marketplace.client_address import client_address
from marketplace.tenancy import caller_for_request


class DownloadLinksRequestSerializer(serializers.Serializer):
    paths = serializers.ListField(
        child=serializers.CharField(max_length=300, trim_whitespace=False),
        min_length=1,
        max_length=MAX_LINKS_PER_REQUEST,
        help_text=(
            f"Files of the delivery (as in manifest.json), 1 to {MAX_LINKS_PER_REQUEST}, each once."
        ),
    )


class DownloadLinkSerializer(serializers.Serializer):
    path = serializers.CharField(source="file.path")
    size_bytes = serializers.IntegerField(source="file.size_bytes")
    sha256 = serializers.CharField(source="file.sha256")
    url = serializers.URLField(help_text="A storage GET signed for `expires_in` seconds.")


class DownloadLinksSerializer(serializers.Serializer):
    expires_at = serializers.DateTimeField()
    expires_in = serializers.IntegerField(help_text="Seconds each link stays valid.")
    links = DownloadLinkSerializer(many=True, help_text="In the order the paths were given.")


class DeliveryDownloadLinks(CustomerApi, APIView):
    @extend_schema(
        request=DownloadLinksRequestSerializer,
        responses={200: DownloadLinksSerializer},
        summary="Freshly signed, short-lived links to many files at once (each recorded)",
        description=(
            "Every path gets its own DownloadEvent, as with the one-file redirect. All or "
            "nothing: a path the delivery does not hold is 404 (`fields.paths` names its "
            "index), a path given twice is 400 `duplicate_path`, more than "
            f"{MAX_LINKS_PER_REQUEST} paths 400 `invalid`; a revoked delivery is 409 "
            "`delivery_revoked`."
        ),
        examples=[
            OpenApiExample(
                "Two files",
                value={"paths": ["manifest.json", "data/chunk-000/file-000.parquet"]},
                request_only=True,
            )
        ],
    )
    def post(self, request, pk):
        body = DownloadLinksRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        links = delivery_download_links(
            caller=caller_for_request(request),
            delivery_id=pk,
            paths=body.validated_data["paths"],
            ip_address=client_address(request),
            user_agent=request.headers.get("User-Agent", ""),
        )
        response = Response(DownloadLinksSerializer(links).data)
        response["Cache-Control"] = "no-store"
        return response
