"""REST API for payments. Thin: shapes here, rules in billing.services."""

import django_filters
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.response import Response

from billing.models import Payment
from billing.services.payments import PAYING_ROLES, payment_start
from marketplace.errors import NotFound
from marketplace.idempotency import idempotent_response
from marketplace.permissions import IsCustomer
from marketplace.tenancy import caller_for_request
from marketplace.throttling import CallerRateThrottle
from orders.models import Order


class CanPay(BasePermission):
    """`PAYING_ROLES` may pay; everyone in the organization may read."""

    message = "Your role in this organization cannot pay orders."

    def has_permission(self, request, view) -> bool:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return True
        return caller_for_request(request).has_role(*PAYING_ROLES)


class PaymentSerializer(serializers.ModelSerializer):
    order = serializers.UUIDField(source="order_id", read_only=True)

    class Meta:
        model = Payment
        fields = [
            "id",
            "order",
            "method",
            "status",
            "amount",
            "currency",
            "amount_refunded",
            "failure_message",
            "succeeded_at",
            "created_at",
        ]
        read_only_fields = fields


class PaymentStartedSerializer(PaymentSerializer):
    client_secret = serializers.CharField(
        read_only=True, help_text="For Stripe.js: confirm the PaymentIntent with it."
    )
    checkout_url = serializers.CharField(read_only=True, help_text="Checkout: send the user here.")

    class Meta(PaymentSerializer.Meta):
        fields = [*PaymentSerializer.Meta.fields, "client_secret", "checkout_url"]
        read_only_fields = fields


class PaymentCreateSerializer(serializers.Serializer):
    method = serializers.ChoiceField(
        choices=Payment.Method.choices, default=Payment.Method.PAYMENT_INTENT
    )


class PaymentFilter(django_filters.FilterSet):
    status = django_filters.MultipleChoiceFilter(choices=Payment.Status.choices)
    order = django_filters.UUIDFilter(field_name="order_id")

    class Meta:
        model = Payment
        fields = ["status", "order"]


@extend_schema_view(
    get=extend_schema(summary="List the organization's payments"),
)
class PaymentList(generics.ListAPIView):
    permission_classes = [IsAuthenticated, IsCustomer]
    throttle_classes = [CallerRateThrottle]
    serializer_class = PaymentSerializer
    filterset_class = PaymentFilter

    def get_queryset(self):
        organization = caller_for_request(self.request).organization
        return Payment.objects.filter(organization=organization)


@extend_schema_view(
    get=extend_schema(summary="List an order's payments"),
    post=extend_schema(
        summary="Pay an order",
        description=(
            "Opens a payment for an order awaiting payment: `payment_intent` (default) returns "
            "the PaymentIntent's `client_secret`; `checkout` returns a Stripe Checkout "
            "`checkout_url`. An open payment of the same method is returned again (200). "
            "The order becomes paid when Stripe confirms the payment (webhook). Send an "
            "`Idempotency-Key` header to make retries safe."
        ),
        request=PaymentCreateSerializer,
        responses={201: PaymentStartedSerializer, 200: PaymentStartedSerializer},
        parameters=[
            OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False)
        ],
    ),
)
class OrderPayments(generics.ListAPIView):
    permission_classes = [IsAuthenticated, IsCustomer, CanPay]
    throttle_classes = [CallerRateThrottle]
    serializer_class = PaymentSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Payment.objects.none()
        organization = caller_for_request(self.request).organization
        if not Order.objects.filter(pk=self.kwargs["pk"], organization=organization).exists():
            raise NotFound("Order not found.")  # another organization's order: 404, not []
        return Payment.objects.filter(organization=organization, order_id=self.kwargs["pk"])

    def post(self, request, pk):
        caller = caller_for_request(request)
        serializer = PaymentCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)

        def pay() -> Response:
            payment, created = payment_start(
                caller=caller, order_id=pk, method=serializer.validated_data["method"]
            )
            return Response(
                PaymentStartedSerializer(payment).data,
                status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            )

        return idempotent_response(
            request=request,
            organization=caller.organization,
            scope=f"billing.payments.create:{pk}",
            handler=pay,
        )
