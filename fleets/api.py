"""The fleet API (`/api/v1/fleet/...`), for fleet-operator keys only. Thin: rules in services.

A fleet operator sees only its own fleets, sites, robots, offers and jobs: anything else
is a 404. Customer organizations get 403 on every endpoint here.
"""

import zoneinfo
from decimal import Decimal

from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from fleets import selectors
from fleets.models import Bid, EndEffector, Fleet, Job, Offer, Robot, Site, SiteKind
from fleets.services.dispatch import bid_place, offer_accept, offer_decline
from fleets.services.jobs import job_report_progress
from fleets.services.registry import (
    fleet_create,
    fleet_heartbeat,
    fleet_rotate_secret,
    fleet_update,
    robot_create,
    robot_update,
    site_create,
    site_update,
    validate_webhook_url,
)
from marketplace.errors import ServiceError
from marketplace.permissions import FleetOperatorApi
from marketplace.responses import shown_once

HOURS = {"max_digits": 9, "decimal_places": 2}
MONEY = {"max_digits": 14, "decimal_places": 4}


# --- Registry ----------------------------------------------------------------------------------


class FleetSerializer(serializers.ModelSerializer):
    name = serializers.CharField(max_length=120)
    status = serializers.ChoiceField(choices=Fleet.Status.choices, default=Fleet.Status.ACTIVE)
    timezone = serializers.CharField(max_length=64, default="UTC")
    weekly_capacity_hours = serializers.DecimalField(
        **HOURS, min_value=Decimal("0"), max_value=Decimal("168000")
    )
    # The range and the ISO 4217 code are the registry service's to check (one error code each).
    payout_rate_per_hour = serializers.DecimalField(**MONEY)
    currency = serializers.CharField(max_length=3, default="USD")
    # checked by marketplace.outbound_webhooks alone, as a customer's (no second URL rule)
    webhook_url = serializers.CharField(
        max_length=500, required=False, allow_blank=True, default=""
    )

    class Meta:
        model = Fleet
        fields = [
            "id",
            "name",
            "status",
            "timezone",
            "weekly_capacity_hours",
            "payout_rate_per_hour",
            "currency",
            "quality_score",
            "webhook_url",
            "last_heartbeat_at",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "quality_score", "last_heartbeat_at", "created_at", "updated_at"]

    def validate_timezone(self, value: str) -> str:
        if value not in zoneinfo.available_timezones():
            raise serializers.ValidationError(f"Unknown time zone {value!r}.")
        return value

    def validate_webhook_url(self, value: str) -> str:
        return validate_webhook_url(value)


class FleetWithSecretSerializer(FleetSerializer):
    """Returned once, at creation and on rotation: the secret that signs webhooks."""

    webhook_secret = serializers.CharField(read_only=True)

    class Meta(FleetSerializer.Meta):
        fields = [*FleetSerializer.Meta.fields, "webhook_secret"]


class FleetListCreate(FleetOperatorApi, generics.ListCreateAPIView):
    serializer_class = FleetSerializer

    def get_queryset(self):
        return selectors.fleets_for(organization=self.organization)

    @extend_schema(responses={201: FleetWithSecretSerializer})
    def post(self, request):
        serializer = FleetSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fleet = fleet_create(organization=self.organization, **serializer.validated_data)
        return shown_once(
            Response(FleetWithSecretSerializer(fleet).data, status=status.HTTP_201_CREATED)
        )


class FleetDetail(FleetOperatorApi, generics.RetrieveUpdateDestroyAPIView):
    serializer_class = FleetSerializer

    def get_queryset(self):
        return selectors.fleets_for(organization=self.organization)

    def update(self, request, *args, **kwargs):
        instance = self.get_object()
        serializer = FleetSerializer(instance, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        fleet = fleet_update(
            organization=self.organization, fleet_id=instance.pk, changes=serializer.validated_data
        )
        return Response(FleetSerializer(fleet).data)

    def destroy(self, request, *args, **kwargs):
        """Fleets are retired, never deleted: their jobs and payouts keep referring to them."""
        instance = self.get_object()
        fleet_update(
            organization=self.organization,
            fleet_id=instance.pk,
            changes={"status": Fleet.Status.RETIRED},
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class FleetRotateSecret(FleetOperatorApi, APIView):
    @extend_schema(request=None, responses=FleetWithSecretSerializer)
    def post(self, request, pk):
        fleet = fleet_rotate_secret(organization=self.organization, fleet_id=pk)
        return shown_once(Response(FleetWithSecretSerializer(fleet).data))


class FleetHeartbeat(FleetOperatorApi, APIView):
    @extend_schema(request=None, responses=FleetSerializer)
    def post(self, request, pk):
        fleet = fleet_heartbeat(organization=self.organization, fleet_id=pk)
        return Response(FleetSerializer(fleet).data)


class SiteSerializer(serializers.ModelSerializer):
    fleet = serializers.UUIDField(source="fleet_id")
    name = serializers.CharField(max_length=120)
    kind = serializers.ChoiceField(choices=SiteKind.choices)
    description = serializers.CharField(
        max_length=5000, required=False, default="", allow_blank=True
    )
    objects_available = serializers.ListField(
        child=serializers.CharField(max_length=100), max_length=500, required=False, default=list
    )
    active = serializers.BooleanField(default=True)

    class Meta:
        model = Site
        fields = [
            "id",
            "fleet",
            "name",
            "kind",
            "description",
            "objects_available",
            "active",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]


class SiteListCreate(FleetOperatorApi, generics.ListCreateAPIView):
    serializer_class = SiteSerializer

    def get_queryset(self):
        return selectors.sites_for(organization=self.organization)

    def post(self, request):
        serializer = SiteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        site = site_create(organization=self.organization, fleet_id=data.pop("fleet_id"), **data)
        return Response(SiteSerializer(site).data, status=status.HTTP_201_CREATED)


class SiteDetail(FleetOperatorApi, generics.RetrieveUpdateDestroyAPIView):
    serializer_class = SiteSerializer

    def get_queryset(self):
        return selectors.sites_for(organization=self.organization)

    def update(self, request, *args, **kwargs):
        instance = self.get_object()
        serializer = SiteSerializer(instance, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        changes = dict(serializer.validated_data)
        if "fleet_id" in changes:
            raise ServiceError(
                "A site cannot move to another fleet.", fields={"fleet": ["Read-only."]}
            )
        site = site_update(organization=self.organization, site_id=instance.pk, changes=changes)
        return Response(SiteSerializer(site).data)

    def destroy(self, request, *args, **kwargs):
        """Sites are deactivated, not deleted: past jobs and episodes refer to them."""
        instance = self.get_object()
        site_update(organization=self.organization, site_id=instance.pk, changes={"active": False})
        return Response(status=status.HTTP_204_NO_CONTENT)


class RobotSerializer(serializers.ModelSerializer):
    fleet = serializers.UUIDField(source="fleet_id", read_only=True)
    site = serializers.UUIDField(source="site_id")
    name = serializers.CharField(max_length=120)
    embodiment = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    end_effector = serializers.ChoiceField(choices=EndEffector.choices)
    sensors = serializers.ListField(
        source="sensor_slugs",
        child=serializers.SlugField(max_length=60),
        max_length=20,
        required=False,
        default=list,
    )
    active = serializers.BooleanField(default=True)

    class Meta:
        model = Robot
        fields = [
            "id",
            "fleet",
            "site",
            "name",
            "embodiment",
            "end_effector",
            "sensors",
            "active",
            "created_at",
        ]
        read_only_fields = ["id", "fleet", "created_at"]


class RobotWriteSerializer(serializers.Serializer):
    site = serializers.UUIDField()
    name = serializers.CharField(max_length=120)
    embodiment = serializers.SlugField(max_length=60)
    end_effector = serializers.CharField(max_length=30)  # checked by the service (unknown -> 400)
    sensors = serializers.ListField(
        child=serializers.SlugField(max_length=60), max_length=20, required=False, default=list
    )
    active = serializers.BooleanField(default=True)


class RobotListCreate(FleetOperatorApi, generics.ListCreateAPIView):
    serializer_class = RobotSerializer

    def get_queryset(self):
        return selectors.robots_for(organization=self.organization)

    @extend_schema(request=RobotWriteSerializer, responses={201: RobotSerializer})
    def post(self, request):
        serializer = RobotWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        robot = robot_create(organization=self.organization, site_id=data.pop("site"), **data)
        return Response(RobotSerializer(robot).data, status=status.HTTP_201_CREATED)


class RobotDetail(FleetOperatorApi, generics.RetrieveUpdateDestroyAPIView):
    serializer_class = RobotSerializer

    def get_queryset(self):
        return selectors.robots_for(organization=self.organization)

    @extend_schema(request=RobotWriteSerializer)
    def update(self, request, *args, **kwargs):
        instance = self.get_object()
        serializer = RobotWriteSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        robot = robot_update(
            organization=self.organization,
            robot_id=instance.pk,
            changes=dict(serializer.validated_data),
        )
        return Response(RobotSerializer(robot).data)

    def destroy(self, request, *args, **kwargs):
        instance = self.get_object()
        robot_update(
            organization=self.organization, robot_id=instance.pk, changes={"active": False}
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Work: offers, bids, jobs ---------------------------------------------------------------


class JobSerializer(serializers.ModelSerializer):
    order = serializers.UUIDField(source="order_id", read_only=True)
    task_type = serializers.CharField(source="order.task_type.slug", read_only=True)
    embodiment = serializers.CharField(source="embodiment.slug", read_only=True)
    sensors = serializers.ListField(
        source="sensor_slugs", child=serializers.CharField(), read_only=True
    )
    fleet = serializers.UUIDField(source="fleet_id", read_only=True, allow_null=True)
    site = serializers.UUIDField(source="site_id", read_only=True, allow_null=True)
    stream_spec = serializers.JSONField(
        source="order.stream_spec",
        read_only=True,
        help_text="What every episode carries (orders/streams.py): state/action names, "
        "cameras (observation.images.<name>, minimum resolution), vectors; {}: state/action only.",
    )
    target_seconds = serializers.DecimalField(
        max_digits=14,
        decimal_places=3,
        read_only=True,
        help_text="Accepted seconds the job collects and is paid for: target_hours x 3600, or "
        "less for a re-collection of excluded time (target_hours is then rounded up).",
    )
    plan = serializers.SerializerMethodField(
        help_text="The order's collection plan as it concerns the job's environment (issue 30): "
        "whether QA checks cells, distinct sites or scenes, object cells per environment, "
        "object categories allowed, whether cameras must be calibrated, a cell's maximum share."
    )

    class Meta:
        model = Job
        fields = [
            "id",
            "order",
            "task_type",
            "status",
            "is_pilot",
            "environment_index",
            "embodiment",
            "end_effector",
            "sensors",
            "stream_spec",
            "plan",
            "site_kinds",
            "target_hours",
            "target_seconds",
            "progress_hours",
            "deadline",
            "fleet",
            "site",
            "last_heartbeat_at",
            "created_at",
        ]
        read_only_fields = fields

    def get_plan(self, job) -> dict:
        order = job.order
        return {
            "cells_planned": order.cells_planned,
            "environment_unit": order.environment_unit,
            "objects_per_environment": order.objects_per_environment,
            "distinct_objects": order.distinct_objects,
            "object_categories": list(order.object_categories),
            "calibrated_cameras": order.calibrated_cameras,
            "cell_max_share_percent": str(order.cell_max_share_percent),
            # a job collecting one cell's shortfall takes that cell's object only (QA)
            "shortfall": _shortfall(job),
        }


def _shortfall(job) -> dict | None:
    """The cell a shortfall job collects (its object's name once bound), else None (no query
    for other jobs)."""
    if job.shortfall_cell_id is None:
        return None
    cell = job.shortfall_cell
    return {
        "object_slot": cell.object_slot,
        "object": cell.site_object.name if cell.site_object_id else None,
    }


class OpenJobSerializer(JobSerializer):
    """A job open for bids, as any capable fleet sees it: no customer order, no holder."""

    class Meta(JobSerializer.Meta):
        fields = [f for f in JobSerializer.Meta.fields if f not in ("order", "fleet", "site")]
        read_only_fields = fields


class OfferSerializer(serializers.ModelSerializer):
    job = JobSerializer(read_only=True)
    fleet = serializers.UUIDField(source="fleet_id", read_only=True)
    site = serializers.UUIDField(source="site_id", read_only=True)

    class Meta:
        model = Offer
        fields = [
            "id",
            "job",
            "fleet",
            "site",
            "status",
            "score",
            "rate_per_hour",
            "currency",
            "expires_at",
            "responded_at",
            "created_at",
        ]
        read_only_fields = fields


class AssignmentSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    job = serializers.UUIDField(source="job_id")
    fleet = serializers.UUIDField(source="fleet_id")
    site = serializers.UUIDField(source="site_id")
    offer = serializers.UUIDField(source="offer_id", allow_null=True)
    rate_per_hour = serializers.DecimalField(
        max_digits=14, decimal_places=4, help_text="The agreed pay per accepted hour."
    )
    currency = serializers.CharField()
    created_at = serializers.DateTimeField()


class OfferList(FleetOperatorApi, generics.ListAPIView):
    """Offers to the caller's fleets; `?status=pending` (default) or another status, or `all`."""

    serializer_class = OfferSerializer

    def get_queryset(self):
        queryset = selectors.offers_for(organization=self.organization)
        wanted = self.request.query_params.get("status", Offer.Status.PENDING)
        if wanted != "all":
            if wanted not in Offer.Status.values:
                raise serializers.ValidationError({"status": [f"Unknown status {wanted!r}."]})
            queryset = queryset.filter(status=wanted)
        return queryset


class OfferAccept(FleetOperatorApi, APIView):
    @extend_schema(request=None, responses={200: AssignmentSerializer})
    def post(self, request, pk):
        assignment = offer_accept(organization=self.organization, offer_id=pk)
        return Response(AssignmentSerializer(assignment).data, status=status.HTTP_200_OK)


class DeclineSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)


class OfferDecline(FleetOperatorApi, APIView):
    @extend_schema(request=DeclineSerializer, responses={200: OfferSerializer})
    def post(self, request, pk):
        serializer = DeclineSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        offer = offer_decline(
            organization=self.organization, offer_id=pk, reason=serializer.validated_data["reason"]
        )
        offer = selectors.offers_for(organization=self.organization).get(pk=offer.pk)
        return Response(OfferSerializer(offer).data)


class AssignedJobList(FleetOperatorApi, generics.ListAPIView):
    """Jobs the caller's fleets hold (offered to them, assigned or in progress, or done)."""

    serializer_class = JobSerializer

    def get_queryset(self):
        return selectors.jobs_held_by(organization=self.organization).filter(
            status__in=[Job.Status.ASSIGNED, Job.Status.IN_PROGRESS, Job.Status.COMPLETED]
        )


class OpenJobList(FleetOperatorApi, generics.ListAPIView):
    """Jobs open for bids that one of the caller's robots could do (embodiment, effector)."""

    serializer_class = OpenJobSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation: no database
            return Job.objects.none()
        robots = selectors.robots_for(organization=self.organization).filter(active=True)
        pairs = set(robots.values_list("embodiment_id", "end_effector"))
        queryset = selectors.jobs_open_for_bids()
        if not pairs:
            return queryset.none()
        embodiments = {e for e, _ in pairs}
        effectors = {f for _, f in pairs}
        return queryset.filter(embodiment_id__in=embodiments, end_effector__in=effectors)


class BidSerializer(serializers.ModelSerializer):
    job = serializers.UUIDField(source="job_id", read_only=True)
    fleet = serializers.UUIDField(source="fleet_id", read_only=True)
    site = serializers.UUIDField(source="site_id")
    price_per_hour = serializers.DecimalField(**MONEY, min_value=Decimal("0"))
    earliest_finish = serializers.DateTimeField()

    class Meta:
        model = Bid
        fields = [
            "id",
            "job",
            "fleet",
            "site",
            "price_per_hour",
            "earliest_finish",
            "status",
            "created_at",
        ]
        read_only_fields = ["id", "job", "fleet", "status", "created_at"]


class JobBid(FleetOperatorApi, APIView):
    @extend_schema(request=BidSerializer, responses={201: BidSerializer})
    def post(self, request, pk):
        serializer = BidSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        bid = bid_place(
            organization=self.organization,
            job_id=pk,
            site_id=data["site_id"],
            price_per_hour=data["price_per_hour"],
            earliest_finish=data["earliest_finish"],
        )
        return Response(BidSerializer(bid).data, status=status.HTTP_201_CREATED)


class ProgressSerializer(serializers.Serializer):
    progress_hours = serializers.DecimalField(
        **HOURS, min_value=Decimal("0"), required=False, allow_null=True, default=None
    )


class JobProgress(FleetOperatorApi, APIView):
    """Heartbeat and progress for a held job (the first report starts it)."""

    @extend_schema(request=ProgressSerializer, responses=JobSerializer)
    def post(self, request, pk):
        serializer = ProgressSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        job = job_report_progress(
            organization=self.organization,
            job_id=pk,
            progress_hours=serializer.validated_data["progress_hours"],
        )
        job = selectors.jobs_held_by(organization=self.organization).get(pk=job.pk)
        return Response(JobSerializer(job).data)
