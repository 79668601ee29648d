"""Claims and disputes over the API (thin: datasets.services.claims and disputes).

Customers: POST /deliveries/<id>/claims, GET /orders/<id>/claims, GET /claims/<id>.
Fleets: GET /fleet/disputes, GET /fleet/disputes/<id>, POST /fleet/disputes/<id>/answer.
Staff decide on the staff console (portal/views/disputes.py)."""

from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from datasets import claim_selectors
from datasets.api_customer import CustomerApi, CustomerOrderApi
from datasets.models import Claim, ClaimEvent, ClaimItem, Dispute, ExclusionReason
from datasets.services.claims import MAX_ITEMS, claim_create
from datasets.services.disputes import dispute_answer
from marketplace.audit import public_label
from marketplace.permissions import FleetOperatorApi
from marketplace.tenancy import caller_for_request

# --- Customers -------------------------------------------------------------------------------


class ClaimItemRequestSerializer(serializers.Serializer):
    episode = serializers.UUIDField()
    reason_code = serializers.ChoiceField(choices=ExclusionReason.choices)
    start_seconds = serializers.DecimalField(
        max_digits=12, decimal_places=3, required=False, allow_null=True, min_value=0
    )
    end_seconds = serializers.DecimalField(
        max_digits=12, decimal_places=3, required=False, allow_null=True, min_value=0
    )
    note = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)


class ClaimRequestSerializer(serializers.Serializer):
    remedy = serializers.ChoiceField(choices=Claim.Remedy.choices)
    note = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)
    items = ClaimItemRequestSerializer(
        many=True,
        required=False,
        max_length=MAX_ITEMS,
        help_text="Per episode: a reason code, optionally a time range in it and a note.",
    )
    # Shorthand: the same reason for every named episode.
    episodes = serializers.ListField(
        child=serializers.UUIDField(), required=False, max_length=MAX_ITEMS
    )
    reason_code = serializers.ChoiceField(choices=ExclusionReason.choices, required=False)

    def validate(self, data):
        if bool(data.get("items")) == bool(data.get("episodes")):
            raise serializers.ValidationError(
                {"items": ["Give items, or episodes with one reason_code."]}
            )
        if data.get("episodes") and not data.get("reason_code"):
            raise serializers.ValidationError({"reason_code": ["Name the reason."]})
        return data

    def claimed(self) -> list[dict]:
        data = self.validated_data
        if data.get("items"):
            return [dict(item) for item in data["items"]]
        return [{"episode": e, "reason_code": data["reason_code"]} for e in data["episodes"]]


ITEM_FIELDS = [
    "episode",
    "reason_code",
    "start_seconds",
    "end_seconds",
    "note",
    "seconds",
    "status",
    "recheck",
    "recheck_detail",
]


class ClaimItemSerializer(serializers.ModelSerializer):
    episode = serializers.UUIDField(source="episode_id", read_only=True)
    dispute = serializers.UUIDField(source="dispute_id", read_only=True, allow_null=True)

    class Meta:
        model = ClaimItem
        fields = [*ITEM_FIELDS, "route", "dispute"]
        read_only_fields = fields


# "" until staff decide
DECISION = serializers.ChoiceField(
    choices=Dispute.Decision.choices, allow_blank=True, read_only=True
)


class ClaimDisputeSerializer(serializers.ModelSerializer):
    """A dispute as the customer sees it: the fleet's answer and the staff's decision."""

    decision = DECISION

    class Meta:
        model = Dispute
        fields = [
            "id",
            "status",
            "answer_due_at",
            "answer",
            "answered_at",
            "decision",
            "decision_note",
            "decided_at",
        ]
        read_only_fields = fields


class ClaimEventSerializer(serializers.ModelSerializer):
    actor = serializers.SerializerMethodField()
    dispute = serializers.UUIDField(source="dispute_id", read_only=True, allow_null=True)

    class Meta:
        model = ClaimEvent
        fields = ["action", "actor", "dispute", "note", "data", "created_at"]
        read_only_fields = fields

    def get_actor(self, event) -> str:
        return public_label(event.actor_label)


class ClaimSerializer(serializers.ModelSerializer):
    order = serializers.UUIDField(source="order_id", read_only=True)
    delivery = serializers.UUIDField(source="delivery_id", read_only=True)
    actor = serializers.SerializerMethodField()
    items = ClaimItemSerializer(many=True, read_only=True)
    disputes = ClaimDisputeSerializer(many=True, read_only=True)
    events = ClaimEventSerializer(many=True, read_only=True)

    class Meta:
        model = Claim
        fields = [
            "id",
            "order",
            "delivery",
            "remedy",
            "note",
            "status",
            "actor",
            "created_at",
            "decided_at",
            "items",
            "disputes",
            "events",
        ]
        read_only_fields = fields

    def get_actor(self, claim) -> str:
        return public_label(claim.actor_label)


class DeliveryClaimCreate(CustomerApi, APIView):
    """POST /deliveries/<id>/claims. Credit needs the owner or billing role, re-collection the
    owner or member role (the service decides: a 403 otherwise)."""

    @extend_schema(
        request=ClaimRequestSerializer,
        responses={201: ClaimSerializer},
        summary="Claim delivered episodes: re-checked, granted at once within the allowance, "
        "else a dispute staff decide",
    )
    def post(self, request, pk):
        serializer = ClaimRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        claim = claim_create(
            caller=caller_for_request(request),
            delivery_id=pk,
            remedy=serializer.validated_data["remedy"],
            items=serializer.claimed(),
            note=serializer.validated_data["note"],
        )
        claim = claim_selectors.customer_claim(organization=self.organization, claim_id=claim.id)
        return Response(ClaimSerializer(claim).data, status=status.HTTP_201_CREATED)


@extend_schema(summary="The order's claims, their episodes, disputes and audit")
class OrderClaimList(CustomerOrderApi, generics.ListAPIView):
    serializer_class = ClaimSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Claim.objects.none()
        order = self.customer_order()
        return claim_selectors.customer_claims(organization=self.organization, order_id=order.id)


@extend_schema(summary="One claim: each episode's re-check and decision, the fleet's answer")
class ClaimDetail(CustomerApi, generics.RetrieveAPIView):
    serializer_class = ClaimSerializer

    def get_object(self):
        return claim_selectors.customer_claim(
            organization=self.organization, claim_id=self.kwargs["pk"]
        )


# --- Fleets ----------------------------------------------------------------------------------


class DisputeItemSerializer(serializers.ModelSerializer):
    episode = serializers.UUIDField(source="episode_id", read_only=True)
    job = serializers.UUIDField(source="episode.job_id", read_only=True)

    class Meta:
        model = ClaimItem
        fields = ["job", *ITEM_FIELDS]
        read_only_fields = fields


class FleetDisputeSerializer(serializers.ModelSerializer):
    """A dispute as its fleet sees it (never who the customer is)."""

    order = serializers.UUIDField(source="claim.order_id", read_only=True)
    fleet = serializers.UUIDField(source="fleet_id", read_only=True)
    remedy = serializers.CharField(source="claim.remedy", read_only=True)
    customer_note = serializers.CharField(source="claim.note", read_only=True)
    decision = DECISION
    items = DisputeItemSerializer(many=True, read_only=True)

    class Meta:
        model = Dispute
        fields = [
            "id",
            "order",
            "fleet",
            "status",
            "remedy",
            "customer_note",
            "answer_due_at",
            "answer",
            "answered_at",
            "decision",
            "decision_note",
            "decided_at",
            "created_at",
            "items",
        ]
        read_only_fields = fields


class DisputeAnswerSerializer(serializers.Serializer):
    answer = serializers.CharField(max_length=4000)


@extend_schema(summary="Disputes over the fleet's delivered episodes")
class FleetDisputeList(FleetOperatorApi, generics.ListAPIView):
    serializer_class = FleetDisputeSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Dispute.objects.none()
        return claim_selectors.fleet_disputes(organization=self.organization)


@extend_schema(summary="One dispute: the claimed episodes, reasons and deadline")
class FleetDisputeDetail(FleetOperatorApi, generics.RetrieveAPIView):
    serializer_class = FleetDisputeSerializer

    def get_object(self):
        return claim_selectors.fleet_dispute(
            organization=self.organization, dispute_id=self.kwargs["pk"]
        )


class FleetDisputeAnswer(FleetOperatorApi, APIView):
    @extend_schema(
        request=DisputeAnswerSerializer,
        responses={200: FleetDisputeSerializer},
        summary="Answer a dispute (once, before its deadline); staff decide after",
    )
    def post(self, request, pk):
        serializer = DisputeAnswerSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        dispute_answer(
            caller=caller_for_request(request),
            dispute_id=pk,
            answer=serializer.validated_data["answer"],
        )
        dispute = claim_selectors.fleet_dispute(organization=self.organization, dispute_id=pk)
        return Response(FleetDisputeSerializer(dispute).data)
