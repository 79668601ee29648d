"""Fleet API for operators (issue 16): register, list, edit the people who teleoperate a
fleet's robots, by pseudonym. Their figures are datasets' (datasets/api_operators.py)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.response import Response

from fleets.models import Operator
from fleets.services.operators import operator_create, operator_update
from marketplace.errors import invalid
from marketplace.permissions import FleetOperatorApi


class OperatorSerializer(serializers.ModelSerializer):
    fleet = serializers.UUIDField(source="fleet_id")
    pseudonym = serializers.CharField(
        max_length=64, help_text="Unique in the fleet; letters, digits, . _ - (never a name)."
    )
    site = serializers.UUIDField(source="site_id", required=False, allow_null=True, default=None)
    skill_notes = serializers.CharField(
        max_length=5000, required=False, default="", allow_blank=True
    )
    active = serializers.BooleanField(default=True)

    class Meta:
        model = Operator
        fields = ["id", "fleet", "pseudonym", "site", "skill_notes", "active", "created_at"]
        read_only_fields = ["id", "created_at"]


def operators_for(*, organization):
    return Operator.objects.filter(fleet__organization=organization).order_by("pseudonym", "id")


@extend_schema_view(
    get=extend_schema(
        parameters=[OpenApiParameter("fleet", str, description="Only this fleet's operators.")]
    )
)
class OperatorListCreate(FleetOperatorApi, generics.ListCreateAPIView):
    serializer_class = OperatorSerializer

    def get_queryset(self):
        operators = operators_for(organization=self.organization)
        fleet = self.request.query_params.get("fleet")
        if fleet:
            operators = operators.filter(fleet_id=serializers.UUIDField().to_internal_value(fleet))
        return operators

    def post(self, request):
        serializer = OperatorSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        operator = operator_create(
            organization=self.organization, fleet_id=data.pop("fleet_id"), **data
        )
        return Response(OperatorSerializer(operator).data, status=status.HTTP_201_CREATED)


class OperatorDetail(FleetOperatorApi, generics.RetrieveUpdateAPIView):
    serializer_class = OperatorSerializer

    def get_queryset(self):
        return operators_for(organization=self.organization)

    def update(self, request, *args, **kwargs):
        instance = self.get_object()
        serializer = OperatorSerializer(instance, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        changes = dict(serializer.validated_data)
        if "fleet_id" in changes and changes.pop("fleet_id") != instance.fleet_id:
            raise invalid("fleet", "An operator cannot move to another fleet.")
        operator = operator_update(
            organization=self.organization, operator_id=instance.pk, changes=changes
        )
        return Response(OperatorSerializer(operator).data)
