"""Operator figures (issue 16): a fleet's own operators across orders, and a customer's
order per operator pseudonym, with outliers against the order's median flagged
(datasets/operator_figures.py). Registering operators is the fleets API's."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from datasets.operator_figures import fleet_operator_figures, order_operator_figures
from marketplace.errors import NotFound
from marketplace.permissions import FleetOperatorApi, IsCustomer
from marketplace.tenancy import caller_for_request
from marketplace.throttling import CallerRateThrottle
from orders.selectors import order_list


class OperatorFiguresSerializer(serializers.Serializer):
    operator = serializers.CharField(help_text="The pseudonym.")
    episodes = serializers.IntegerField(help_text="Checked episodes (accepted or rejected).")
    episodes_accepted = serializers.IntegerField()
    acceptance_rate = serializers.FloatField()
    success_rate = serializers.FloatField(allow_null=True)
    mean_duration_seconds = serializers.DecimalField(
        max_digits=12, decimal_places=1, allow_null=True
    )
    duration_spread_seconds = serializers.DecimalField(
        max_digits=12, decimal_places=1, allow_null=True
    )
    idle_fraction = serializers.FloatField(allow_null=True)
    jerk = serializers.FloatField(allow_null=True)
    quality_score = serializers.FloatField(allow_null=True)


class OrderOperatorFiguresSerializer(OperatorFiguresSerializer):
    flags = serializers.ListField(
        child=serializers.CharField(), help_text="quality, acceptance: outliers in this order."
    )


class OutlierSerializer(serializers.Serializer):
    order = serializers.UUIDField()
    reasons = serializers.ListField(child=serializers.CharField())


class FleetOperatorFiguresSerializer(OperatorFiguresSerializer):
    fleet = serializers.UUIDField()
    registered_operator = serializers.UUIDField(allow_null=True)
    orders = serializers.IntegerField()
    outlier_in = OutlierSerializer(many=True)


class FleetOperatorFigures(FleetOperatorApi, APIView):
    @extend_schema(
        responses=FleetOperatorFiguresSerializer(many=True),
        summary="Your operators' figures across orders, with the orders they are outliers in",
    )
    def get(self, request):
        rows = fleet_operator_figures(organization=self.organization)
        return Response(FleetOperatorFiguresSerializer(rows, many=True).data)


class OrderOperatorFigures(APIView):
    permission_classes = [IsAuthenticated, IsCustomer]
    throttle_classes = [CallerRateThrottle]

    @extend_schema(
        responses=OrderOperatorFiguresSerializer(many=True),
        summary="An order's figures per operator pseudonym, outliers flagged",
    )
    def get(self, request, pk):
        order = (
            order_list(organization=caller_for_request(request).organization).filter(pk=pk).first()
        )
        if order is None:
            raise NotFound("Order not found.")
        rows = order_operator_figures(order=order)
        return Response(OrderOperatorFiguresSerializer(rows, many=True).data)
