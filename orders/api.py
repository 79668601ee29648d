"""REST API for the catalog, quotes and orders. Thin: shapes here, rules in services."""

from decimal import Decimal

import django_filters
from django.http import Http404
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import generics, serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from marketplace.authentication import require_unrevoked_key
from marketplace.conditional import conditional_response
from marketplace.error_codes import ErrorCode as CommonCode
from marketplace.errors import ServiceError
from marketplace.filters import UtcIsoDateTimeFilter
from marketplace.idempotency import idempotent_response
from marketplace.permissions import CanOrder, IsCustomer
from marketplace.tenancy import caller_for_request
from marketplace.throttling import PUBLIC_THROTTLES, CallerRateThrottle
from orders import services
from orders.api_plan import PLAN_FIELDS, PlanRequestFields, plan_advice_field, supply_field
from orders.content_qa import content_qa_thresholds
from orders.error_codes import ErrorCode
from orders.models import (
    ComplexityLevel,
    Embodiment,
    Order,
    OrderEvent,
    OutputFormat,
    Quote,
    SensorAddon,
    TaskType,
)
from orders.representations import (
    ORDER_PAGES,
    order_detail_representation,
    order_detail_row,
    order_representation,
    order_row,
    order_rows,
    quote_representation,
)
from orders.selectors import order_list, quote_visible_to, rate_card_current
from orders.streams import DEFAULT_VIDEO_CODEC, VIDEO_CODECS

# --- Catalog (public, read-only) -------------------------------------------------------------


class ComplexityLevelSerializer(serializers.ModelSerializer):
    class Meta:
        model = ComplexityLevel
        fields = ["level", "name", "description", "examples"]


class TaskTypeSerializer(serializers.ModelSerializer):
    default_complexity = serializers.IntegerField(source="default_complexity_id")

    class Meta:
        model = TaskType
        fields = ["slug", "name", "description", "category", "contact_rich", "default_complexity"]


class EmbodimentSerializer(serializers.ModelSerializer):
    content_qa = serializers.SerializerMethodField(
        help_text="The content QA thresholds applied to this robot's episodes (datasets/README)."
    )

    class Meta:
        model = Embodiment
        fields = [
            "slug",
            "name",
            "description",
            "arms",
            "action_dim",
            "state_names",
            "action_names",
            "cameras",
            "state_limits",
            "content_qa",
        ]

    def get_content_qa(self, embodiment) -> dict:
        return content_qa_thresholds(embodiment)


class SensorAddonSerializer(serializers.ModelSerializer):
    class Meta:
        model = SensorAddon
        fields = ["slug", "name", "description", "stream"]


class PublicCatalogMixin:
    permission_classes = [AllowAny]
    throttle_classes = PUBLIC_THROTTLES
    pagination_class = None


class ComplexityLevelList(PublicCatalogMixin, generics.ListAPIView):
    serializer_class = ComplexityLevelSerializer
    queryset = ComplexityLevel.objects.all()


class TaskTypeList(PublicCatalogMixin, generics.ListAPIView):
    serializer_class = TaskTypeSerializer
    queryset = TaskType.objects.filter(active=True)


class EmbodimentList(PublicCatalogMixin, generics.ListAPIView):
    serializer_class = EmbodimentSerializer
    queryset = Embodiment.objects.filter(active=True)


class SensorAddonList(PublicCatalogMixin, generics.ListAPIView):
    serializer_class = SensorAddonSerializer
    queryset = SensorAddon.objects.filter(active=True)


class RateCardSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    currency = serializers.CharField()
    effective_from = serializers.DateTimeField()
    included_environments = serializers.IntegerField()
    extra_environment_fee = serializers.DecimalField(max_digits=14, decimal_places=4)
    included_objects = serializers.IntegerField()
    extra_object_fee = serializers.DecimalField(max_digits=14, decimal_places=4)
    rush_surcharge_percent = serializers.DecimalField(max_digits=5, decimal_places=2)
    standard_lead_days = serializers.IntegerField()
    rush_lead_days = serializers.IntegerField()
    quote_validity_hours = serializers.IntegerField()
    embodiment_rates = serializers.SerializerMethodField()
    complexity_multipliers = serializers.SerializerMethodField()
    sensor_rates = serializers.SerializerMethodField()
    volume_tiers = serializers.SerializerMethodField()

    def get_embodiment_rates(self, card) -> dict[str, str]:
        return {
            r.embodiment.slug: str(r.hourly_rate)
            for r in card.embodiment_rates.select_related("embodiment")
        }

    def get_complexity_multipliers(self, card) -> dict[str, str]:
        return {str(m.level_id): str(m.multiplier) for m in card.complexity_multipliers.all()}

    def get_sensor_rates(self, card) -> dict[str, str]:
        return {
            r.sensor.slug: str(r.hourly_rate) for r in card.sensor_rates.select_related("sensor")
        }

    def get_volume_tiers(self, card) -> list[dict[str, str]]:
        return [
            {"min_hours": str(t.min_hours), "discount_percent": str(t.discount_percent)}
            for t in card.volume_tiers.all()
        ]


class CurrentRateCard(PublicCatalogMixin, APIView):
    @extend_schema(responses=RateCardSerializer)
    def get(self, request):
        card = rate_card_current()
        if card is None:
            raise ServiceError("No rate card is in force.", code=ErrorCode.NO_RATE_CARD)
        return Response(RateCardSerializer(card).data)


# --- Quotes ----------------------------------------------------------------------------------

HOURS_FIELD = {"max_digits": 9, "decimal_places": 2}
# what a quote or order request may not send: prices are the server's
REFUSED_PRICE_FIELDS = ("total", "price", "amount", "lines", "unit_amount", "currency", "rate_card")


class DatasetRequestSerializer(PlanRequestFields):
    task_type = serializers.SlugField(max_length=60)
    complexity = serializers.IntegerField(min_value=1, max_value=5, required=False, allow_null=True)
    embodiment = serializers.SlugField(max_length=60)
    hours = serializers.DecimalField(**HOURS_FIELD, min_value=Decimal("0.01"))
    environments = serializers.IntegerField(min_value=1, default=1)
    objects_per_environment = serializers.IntegerField(min_value=1, max_value=100000, default=1)
    sensors = serializers.ListField(
        child=serializers.SlugField(max_length=60), required=False, default=list, max_length=20
    )
    rush = serializers.BooleanField(default=False)

    def validate(self, attrs):
        refused = [name for name in REFUSED_PRICE_FIELDS if name in self.initial_data]
        if refused:
            raise serializers.ValidationError(
                {name: ["Prices are computed by the server; do not send them."] for name in refused}
            )
        return attrs

    def to_request(self) -> services.DatasetRequest:
        return services.DatasetRequest.of(self.validated_data)


class QuoteRequestSerializer(DatasetRequestSerializer):
    advise = serializers.BooleanField(
        default=False,
        help_text="Also return plan_advice: the plan advisor's proposal (environments x"
        " objects x demonstrations per cell, with why). The quote is priced as requested.",
    )


def _dataset_request(data) -> services.DatasetRequest:
    """The request as the serializer reads it, or its 400 in its own words."""
    serializer = DatasetRequestSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.to_request()


class LineItemSerializer(serializers.Serializer):
    code = serializers.CharField()
    description = serializers.CharField()
    quantity = serializers.CharField(help_text="A decimal, as a string.")
    unit_amount = serializers.CharField(help_text="A decimal, as a string.")
    amount = serializers.CharField(help_text="A decimal in the currency's minor unit, as a string.")


class PricedSpecSerializer(serializers.ModelSerializer):
    task_type = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    embodiment = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    complexity = serializers.IntegerField(source="complexity_id", read_only=True)
    sensors = serializers.ListField(
        source="sensor_slugs", child=serializers.CharField(), read_only=True
    )
    rate_card_version = serializers.IntegerField(source="rate_card.version", read_only=True)
    lines = LineItemSerializer(many=True, read_only=True)

    SPEC_FIELDS = [
        "id",
        "task_type",
        "complexity",
        "embodiment",
        "hours",
        "environments",
        "objects_per_environment",
        "sensors",
        "rush",
        *PLAN_FIELDS,
        "currency",
        "lines",
        "total",
        "rate_card_version",
    ]


class QuoteSerializer(PricedSpecSerializer):
    supply = supply_field()
    plan_advice = plan_advice_field()

    class Meta:
        model = Quote
        fields = [
            *PricedSpecSerializer.SPEC_FIELDS,
            "supply",
            "plan_advice",
            "created_at",
            "expires_at",
        ]
        read_only_fields = fields


@extend_schema_view(
    post=extend_schema(
        request=QuoteRequestSerializer,
        responses={201: QuoteSerializer},
        summary="Price a dataset (anonymous callers welcome, throttled)",
    )
)
class QuoteCreate(APIView):
    permission_classes = [AllowAny]
    throttle_classes = PUBLIC_THROTTLES

    def post(self, request):
        caller = caller_for_request(request)
        serializer = QuoteRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        dataset_request = serializer.to_request()
        require_unrevoked_key(request)  # revoked since it authenticated: 401, nothing stored
        quote = services.quote_create(
            organization=caller.organization,
            request=dataset_request,
            advise=serializer.validated_data["advise"],
        )
        # the hot path: the same fields as QuoteSerializer, built directly (tested equal)
        return Response(quote_representation(quote), status=status.HTTP_201_CREATED)


class PricePreviewSerializer(PricedSpecSerializer):
    class Meta:
        model = Quote
        fields = [f for f in PricedSpecSerializer.SPEC_FIELDS if f != "id"]
        read_only_fields = fields


@extend_schema_view(
    post=extend_schema(
        request=DatasetRequestSerializer,
        responses={200: PricePreviewSerializer},
        summary="Preview a price without storing a quote (live calculators)",
    )
)
class QuotePreview(APIView):
    permission_classes = [AllowAny]
    throttle_classes = PUBLIC_THROTTLES

    def post(self, request):
        preview = services.quote_preview(request=_dataset_request(request.data))
        return Response(PricePreviewSerializer(preview).data)


class QuoteDetail(generics.RetrieveAPIView):
    permission_classes = [AllowAny]
    throttle_classes = PUBLIC_THROTTLES
    serializer_class = QuoteSerializer

    def get_queryset(self):
        organization = caller_for_request(self.request).organization
        return quote_visible_to(organization=organization).select_related(
            "task_type", "embodiment", "rate_card"
        )


# --- Orders ----------------------------------------------------------------------------------


class OrderDetailsSerializer(serializers.Serializer):
    output_format = serializers.ChoiceField(
        choices=OutputFormat.choices, default=OutputFormat.LEROBOT_V3
    )
    success_criterion = serializers.CharField(
        max_length=2000, required=False, default="", allow_blank=True
    )
    deadline = serializers.DateField(required=False, allow_null=True, default=None)
    pilot_hours = serializers.DecimalField(
        **HOURS_FIELD, required=False, allow_null=True, default=None
    )
    notes = serializers.CharField(max_length=5000, required=False, default="", allow_blank=True)
    video_codec = serializers.ChoiceField(
        choices=[(codec, codec) for codec in VIDEO_CODECS],
        default=DEFAULT_VIDEO_CODEC,
        help_text="The delivered videos' codec: av1 (LeRobot's default) or h264 (compatibility).",
    )
    waitlist = serializers.BooleanField(
        default=False,
        help_text="Place the order although the supply check found the platform cannot cover"
        " it: it is waitlisted (collection waits for staff). Without it: 409 not_coverable.",
    )

    def to_details(self) -> services.OrderDetails:
        data = self.validated_data
        return services.OrderDetails(
            **{name: data[name] for name in OrderDetailsSerializer().fields}
        )


class OrderFromQuoteSerializer(OrderDetailsSerializer):
    quote = serializers.UUIDField()


class OrderFromSpecSerializer(OrderDetailsSerializer, DatasetRequestSerializer):
    def to_details(self) -> services.OrderDetails:
        data = self.validated_data
        return services.OrderDetails(
            **{name: data[name] for name in OrderDetailsSerializer().fields}
        )


class OrderEventSerializer(serializers.ModelSerializer):
    actor_label = serializers.CharField(
        source="public_actor_label", read_only=True, help_text="Who acted (staff are `staff`)."
    )

    class Meta:
        model = OrderEvent
        fields = ["from_status", "to_status", "actor_label", "reason", "created_at"]


class OrderSerializer(PricedSpecSerializer):
    quote = serializers.UUIDField(source="quote_id", read_only=True, allow_null=True)
    supply = supply_field()

    class Meta:
        model = Order
        fields = [
            *PricedSpecSerializer.SPEC_FIELDS,
            "quote",
            "status",
            "output_format",
            "success_criterion",
            "deadline",
            "pilot_hours",
            "notes",
            "stream_spec",
            "accepted_hours",
            "supply",
            "cells_planned",
            "waitlisted",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class OrderDetailSerializer(OrderSerializer):
    events = OrderEventSerializer(many=True, read_only=True)

    class Meta(OrderSerializer.Meta):
        fields = [*OrderSerializer.Meta.fields, "events"]
        read_only_fields = fields


class OrderCancelSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)


class OrderFilter(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=Order.Status.choices)
    task_type = django_filters.CharFilter(field_name="task_type__slug")
    embodiment = django_filters.CharFilter(field_name="embodiment__slug")
    created_after = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = UtcIsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Order
        fields = ["status", "task_type", "embodiment", "created_after", "created_before"]


def _refuse_with_quote(data: dict) -> None:
    """With a quote, the price and the priced specification come from the quote alone."""
    refused = {
        name: ["Prices are computed by the server; do not send them."]
        for name in REFUSED_PRICE_FIELDS
        if name in data
    }
    refused.update(
        {
            name: ["Comes from the quote; leave it out or order from a specification instead."]
            for name in DatasetRequestSerializer().fields
            if name in data
        }
    )
    if refused:
        raise ServiceError(
            "An order from a quote takes only the quote and order details.", fields=refused
        )


PAGE_PARAMETERS = {"cursor", "page_size"}  # the order list's query parameters that filter nothing


NOT_MODIFIED = OpenApiResponse(
    description="Not modified: the `ETag` sent in `If-None-Match` is still the body's (no body)."
)
IF_NONE_MATCH = OpenApiParameter(
    "If-None-Match",
    str,
    OpenApiParameter.HEADER,
    required=False,
    description="The `ETag` of an earlier answer: 304 while the body is unchanged.",
)

ORDER_CREATE_DOC = (
    "Place an order, either from a quote (`quote` + order details, at exactly the quoted price) "
    "or from a full specification (priced now). Prices sent by the client are refused. "
    "Send an `Idempotency-Key` header to make retries safe: a retry returns the first order."
)


@extend_schema_view(
    get=extend_schema(
        summary="List the organization's orders",
        responses={200: OrderSerializer(many=True), 304: NOT_MODIFIED},
        parameters=[IF_NONE_MATCH],
    ),
    post=extend_schema(
        summary="Place an order",
        description=ORDER_CREATE_DOC,
        request=OrderFromSpecSerializer,
        responses={201: OrderDetailSerializer},
        parameters=[
            OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False)
        ],
    ),
)
class OrderListCreate(generics.ListAPIView):
    permission_classes = [IsAuthenticated, IsCustomer, CanOrder]
    throttle_classes = [CallerRateThrottle]
    serializer_class = OrderSerializer
    filterset_class = OrderFilter

    def get_queryset(self):
        return order_list(organization=caller_for_request(self.request).organization)

    def list(self, request, *args, **kwargs):
        # the hot path: rows, not model objects, and the same fields as OrderSerializer;
        # without filters, each page's statement compiled once (the same rows, tested): kept
        # in issue 29 for its measured share of the list's throughput (bench/README.md)
        organization = caller_for_request(request).organization
        if request.query_params.keys() <= PAGE_PARAMETERS:
            rows = ORDER_PAGES.bind(organization_id=organization.pk)
        else:
            rows = order_rows(self.filter_queryset(self.get_queryset()))
        page = self.paginate_queryset(rows)
        body = self.get_paginated_response([order_representation(row) for row in page]).data
        return conditional_response(request, body, organization_id=organization.pk)

    def post(self, request):
        caller = caller_for_request(request)
        if not isinstance(request.data, dict):
            raise ServiceError("Expected a JSON object.", code=CommonCode.MALFORMED_REQUEST)

        def create() -> Response:
            if "quote" in request.data:
                serializer = OrderFromQuoteSerializer(data=request.data)
                serializer.is_valid(raise_exception=True)
                _refuse_with_quote(request.data)
                order = services.order_create_from_quote(
                    caller=caller,
                    quote_id=serializer.validated_data["quote"],
                    details=serializer.to_details(),
                )
            else:
                serializer = OrderFromSpecSerializer(data=request.data)
                serializer.is_valid(raise_exception=True)
                order = services.order_create(
                    caller=caller, request=serializer.to_request(), details=serializer.to_details()
                )
            # the same fields as OrderDetailSerializer (tested equal), its events read once
            body = order_detail_representation(order_row(order))
            return Response(body, status=status.HTTP_201_CREATED)

        return idempotent_response(
            request=request, organization=caller.organization, scope="orders.create", handler=create
        )


@extend_schema_view(
    get=extend_schema(
        responses={200: OrderDetailSerializer, 304: NOT_MODIFIED}, parameters=[IF_NONE_MATCH]
    )
)
class OrderDetail(generics.RetrieveAPIView):
    permission_classes = [IsAuthenticated, IsCustomer]
    throttle_classes = [CallerRateThrottle]
    serializer_class = OrderDetailSerializer

    def get_queryset(self):
        return order_list(organization=caller_for_request(self.request).organization)

    def retrieve(self, request, *args, **kwargs):
        # the hot path: one row and its events, the same fields as OrderDetailSerializer
        organization = caller_for_request(request).organization
        row = order_detail_row(organization_id=organization.pk, order_id=kwargs["pk"])
        if row is None:
            raise Http404  # as get_object would: the one 404 body
        body = order_detail_representation(row)
        return conditional_response(request, body, organization_id=organization.pk)


@extend_schema(
    request=OrderCancelSerializer, responses=OrderDetailSerializer, summary="Cancel an order"
)
class OrderCancel(APIView):
    permission_classes = [IsAuthenticated, IsCustomer, CanOrder]
    throttle_classes = [CallerRateThrottle]

    def post(self, request, pk):
        caller = caller_for_request(request)
        serializer = OrderCancelSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        order = services.order_cancel(
            caller=caller, order_id=pk, reason=serializer.validated_data["reason"]
        )
        order = (
            order_list(organization=caller.organization).prefetch_related("events").get(pk=order.pk)
        )
        return Response(OrderDetailSerializer(order).data)
