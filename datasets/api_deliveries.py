"""Customers' delivery endpoints: versions, files, audited download links, revocation and
the pilot review (thin: datasets.services.delivery_versions, downloads, deliveries)."""

from datetime import datetime

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from datasets import selectors
from datasets.api_customer import CustomerApi, CustomerOrderApi
from datasets.models import Delivery, DeliveryFile, ExclusionReason
from datasets.services.deliveries import pilot_review
from datasets.services.delivery_versions import acceptance_deadline, delivery_next_version
from datasets.services.downloads import delivery_download_link, delivery_revoke
from marketplace.client_address import client_address
from marketplace.errors import NotFound
from marketplace.permissions import CanOrder, IsCustomer, IsOrganizationOwner
from marketplace.tenancy import caller_for_request

# --- Customers: deliveries -------------------------------------------------------------------


class DeliveryFileSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeliveryFile
        fields = ["path", "size_bytes", "sha256"]
        read_only_fields = fields


class DeliverySerializer(serializers.ModelSerializer):
    order = serializers.UUIDField(source="order_id", read_only=True)
    revoked = serializers.BooleanField(source="is_revoked", read_only=True)
    previous = serializers.UUIDField(source="previous_id", read_only=True, allow_null=True)
    latest = serializers.BooleanField(source="is_latest", read_only=True)
    acceptance_until = serializers.SerializerMethodField()

    class Meta:
        model = Delivery
        fields = [
            "id",
            "order",
            "kind",
            "version",
            "previous",
            "version_reason",
            "filters",
            "latest",
            "superseded_at",
            "acceptance_until",
            "status",
            "episodes",
            "frames",
            "seconds",
            "review",
            "review_reason",
            "review_codes",
            "reviewed_at",
            "revoked",
            "revoked_at",
            "failure_reason",
            "created_at",
            "ready_at",
        ]
        read_only_fields = fields

    def get_acceptance_until(self, delivery) -> datetime | None:
        """Until when delivered episodes may be rejected (full deliveries, once ready)."""
        return acceptance_deadline(delivery)


class DeliveryVersionSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=Delivery.Kind.choices, default=Delivery.Kind.FULL)
    reason = serializers.CharField(max_length=500, required=False, default="", allow_blank=True)
    filters = serializers.JSONField(required=False, default=dict)


@extend_schema_view(
    get=extend_schema(
        parameters=[
            OpenApiParameter(
                "versions", str, description="`all`: every version; default the latest per kind"
            )
        ],
        summary="The order's deliveries: the latest version of each kind, or every version",
    ),
    post=extend_schema(
        request=DeliveryVersionSerializer,
        responses={201: DeliverySerializer},
        summary="Assemble a new version (optionally filtered by quality or operators)",
    ),
)
class OrderDeliveryList(CustomerOrderApi, generics.ListAPIView):
    serializer_class = DeliverySerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Delivery.objects.none()
        order = self.customer_order()
        if self.request.query_params.get("versions") == "all":
            return Delivery.objects.filter(order=order).order_by("kind", "-version", "-created_at")
        return selectors.latest_deliveries(order=order)

    def post(self, request, pk):
        serializer = DeliveryVersionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        delivery = delivery_next_version(
            caller=caller_for_request(request),
            order_id=pk,
            kind=data["kind"],
            reason=data["reason"] or "Asked for by the customer.",
            filters=data["filters"],
        )
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_201_CREATED)


class DeliveryDetail(CustomerApi, generics.RetrieveAPIView):
    serializer_class = DeliverySerializer

    def get_queryset(self):
        return Delivery.objects.filter(order__organization=self.organization)


class DeliveryFileList(CustomerApi, generics.ListAPIView):
    serializer_class = DeliveryFileSerializer
    pagination_class = None

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return DeliveryFile.objects.none()
        delivery = Delivery.objects.filter(
            pk=self.kwargs["pk"], order__organization=self.organization
        ).first()
        if delivery is None:
            raise NotFound("Delivery not found.")
        return DeliveryFile.objects.filter(delivery=delivery)


class DeliveryDownload(CustomerApi, APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter(
                "path", str, description="A file of the delivery; default manifest.json"
            )
        ],
        responses={302: None},
        summary="Redirect to a freshly signed, short-lived link to one file (recorded)",
    )
    def get(self, request, pk):
        caller = caller_for_request(request)
        link = delivery_download_link(
            caller=caller,
            delivery_id=pk,
            path=request.query_params.get("path", "manifest.json"),
            ip_address=client_address(request),
            user_agent=request.headers.get("User-Agent", ""),
        )
        response = Response(status=status.HTTP_302_FOUND, headers={"Location": link.url})
        response["Cache-Control"] = "no-store"
        return response


class DeliveryRevoke(CustomerApi, APIView):
    permission_classes = [IsAuthenticated, IsCustomer, IsOrganizationOwner]

    @extend_schema(request=None, responses=DeliverySerializer, summary="Stop issuing links at once")
    def post(self, request, pk):
        delivery = delivery_revoke(delivery_id=pk, caller=caller_for_request(request))
        return Response(DeliverySerializer(delivery).data)


class PilotReviewSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=5000, required=False, default="", allow_blank=True)
    # Rejection only: why (ExclusionReason codes), and whether to collect the pilot again
    # (all its episodes, or the ones named).
    reason_codes = serializers.ListField(
        child=serializers.ChoiceField(choices=ExclusionReason.choices),
        required=False,
        default=list,
        max_length=len(ExclusionReason.values),
    )
    recollect = serializers.BooleanField(required=False, default=False)
    episodes = serializers.ListField(
        child=serializers.UUIDField(), required=False, default=list, max_length=1000
    )


class PilotDecision(CustomerApi, APIView):
    """Approve (releases the held jobs) or reject (keeps the reason) a pilot delivery."""

    permission_classes = [IsAuthenticated, IsCustomer, CanOrder]
    approve: bool

    def post(self, request, pk):
        serializer = PilotReviewSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        delivery = pilot_review(
            caller=caller_for_request(request),
            delivery_id=pk,
            approve=self.approve,
            reason=serializer.validated_data["reason"],
            reason_codes=serializer.validated_data["reason_codes"],
            recollect=serializer.validated_data["recollect"],
            episode_ids=serializer.validated_data["episodes"],
        )
        return Response(DeliverySerializer(delivery).data)


@extend_schema_view(
    post=extend_schema(
        request=PilotReviewSerializer, responses=DeliverySerializer, summary="Approve the pilot"
    )
)
class PilotApprove(PilotDecision):
    approve = True


@extend_schema_view(
    post=extend_schema(
        request=PilotReviewSerializer, responses=DeliverySerializer, summary="Reject the pilot"
    )
)
class PilotReject(PilotDecision):
    approve = False
