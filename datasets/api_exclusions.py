"""Customers exclude accepted episodes of their own orders before delivery (one by one or an
operator's), with a reason code, and read the order's exclusions (thin: datasets.services.
exclusions). Delivered episodes are claimed instead (datasets/api_claims.py)."""

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.response import Response

from datasets.api_customer import CustomerOrderApi
from datasets.models import EpisodeExclusion, ExclusionReason
from datasets.services.exclusions import episodes_exclude
from marketplace.audit import public_label
from marketplace.tenancy import caller_for_request

MAX_EPISODES = 1000


class ExclusionRequestSerializer(serializers.Serializer):
    episodes = serializers.ListField(
        child=serializers.UUIDField(), required=False, default=list, max_length=MAX_EPISODES
    )
    operator = serializers.CharField(max_length=64, required=False, default="", allow_blank=True)
    reason_code = serializers.ChoiceField(choices=ExclusionReason.choices)
    note = serializers.CharField(max_length=2000, required=False, default="", allow_blank=True)


class ExclusionSerializer(serializers.ModelSerializer):
    episode = serializers.UUIDField(source="episode_id", read_only=True)
    job = serializers.UUIDField(source="job_id", read_only=True)
    actor = serializers.SerializerMethodField()

    class Meta:
        model = EpisodeExclusion
        fields = [
            "id",
            "episode",
            "job",
            "operator",
            "scope",
            "remedy",
            "reason_code",
            "note",
            "seconds",
            "actor",
            "created_at",
        ]
        read_only_fields = fields

    def get_actor(self, exclusion) -> str:
        return public_label(exclusion.actor_label)


class ExclusionResultSerializer(serializers.Serializer):
    excluded = ExclusionSerializer(many=True)
    already_excluded = serializers.IntegerField()
    seconds = serializers.DecimalField(max_digits=14, decimal_places=3)
    recollection_jobs = serializers.ListField(child=serializers.UUIDField())


@extend_schema_view(
    get=extend_schema(summary="The order's excluded episodes (append-only audit)"),
    post=extend_schema(
        request=ExclusionRequestSerializer,
        responses={201: ExclusionResultSerializer},
        summary="Exclude episodes or an operator: not counted, not paid, re-collected",
    ),
)
class OrderExclusions(CustomerOrderApi, generics.ListAPIView):
    serializer_class = ExclusionSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return EpisodeExclusion.objects.none()
        return EpisodeExclusion.objects.filter(order=self.customer_order())

    def post(self, request, pk):
        serializer = ExclusionRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        result = episodes_exclude(
            caller=caller_for_request(request),
            order_id=pk,
            episode_ids=data["episodes"],
            operator=data["operator"],
            reason_code=data["reason_code"],
            note=data["note"],
        )
        body = {
            "excluded": ExclusionSerializer(result.excluded, many=True).data,
            "already_excluded": result.already,
            "seconds": str(result.seconds),
            "recollection_jobs": [str(job.id) for job in result.recollection_jobs],
        }
        return Response(body, status=status.HTTP_201_CREATED)
