"""REST API for accounts: who am I, and the organization's API keys."""

from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from marketplace import services
from marketplace.errors import NotFound
from marketplace.models import ApiKey, Membership, Organization
from marketplace.permissions import IsOrganizationOwner
from marketplace.responses import shown_once
from marketplace.tenancy import caller_for_request
from marketplace.throttling import CallerRateThrottle


class MeSerializer(serializers.Serializer):
    organization = serializers.UUIDField(allow_null=True)
    organization_name = serializers.CharField(allow_null=True)
    organization_kind = serializers.CharField(allow_null=True)
    role = serializers.CharField(allow_null=True)
    user = serializers.CharField(allow_null=True)
    api_key_prefix = serializers.CharField(allow_null=True)


class Me(APIView):
    throttle_classes = [CallerRateThrottle]

    @extend_schema(responses=MeSerializer, summary="The caller's organization and role")
    def get(self, request):
        caller = caller_for_request(request)
        organization = caller.organization
        return Response(
            MeSerializer(
                {
                    "organization": organization.id if organization else None,
                    "organization_name": organization.name if organization else None,
                    "organization_kind": organization.kind if organization else None,
                    "role": caller.role,
                    "user": caller.user.get_username() if caller.user else None,
                    "api_key_prefix": caller.api_key.prefix if caller.api_key else None,
                }
            ).data
        )


class ApiKeySerializer(serializers.ModelSerializer):
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiKey
        fields = [
            "id",
            "name",
            "prefix",
            "role",
            "created_at",
            "last_used_at",
            "revoked_at",
            "is_active",
        ]
        read_only_fields = ["id", "prefix", "created_at", "last_used_at", "revoked_at", "is_active"]


class ApiKeyCreatedSerializer(ApiKeySerializer):
    key = serializers.CharField(read_only=True, help_text="The secret. Shown once, never again.")

    class Meta(ApiKeySerializer.Meta):
        fields = [*ApiKeySerializer.Meta.fields, "key"]


class ApiKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    role = serializers.ChoiceField(choices=Membership.Role.choices, default=Membership.Role.MEMBER)


class ApiKeyListCreate(generics.ListAPIView):
    """An organization's API keys. Owners only: a key is the organization's identity."""

    permission_classes = [IsAuthenticated, IsOrganizationOwner]
    throttle_classes = [CallerRateThrottle]
    serializer_class = ApiKeySerializer
    filterset_fields = []

    def get_queryset(self):
        return ApiKey.objects.filter(organization=caller_for_request(self.request).organization)

    @extend_schema(request=ApiKeyCreateSerializer, responses={201: ApiKeyCreatedSerializer})
    def post(self, request):
        caller = caller_for_request(request)
        serializer = ApiKeyCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        issued = services.api_key_create(
            organization=caller.organization,
            name=serializer.validated_data["name"],
            role=serializer.validated_data["role"],
            created_by=caller.user,
        )
        data = ApiKeySerializer(issued.api_key).data | {"key": issued.raw_key}
        return shown_once(Response(data, status=status.HTTP_201_CREATED))


class ApiKeyRevoke(APIView):
    permission_classes = [IsAuthenticated, IsOrganizationOwner]
    throttle_classes = [CallerRateThrottle]

    @extend_schema(request=None, responses=ApiKeySerializer, summary="Revoke an API key at once")
    def post(self, request, pk):
        caller = caller_for_request(request)
        api_key = ApiKey.objects.filter(organization=caller.organization, pk=pk).first()
        if api_key is None:
            raise NotFound("API key not found.")
        return Response(ApiKeySerializer(services.api_key_revoke(api_key=api_key)).data)


class WebhookSettingSerializer(serializers.Serializer):
    url = serializers.CharField(max_length=500, allow_blank=True)


class WebhookSettingSetSerializer(WebhookSettingSerializer):
    secret = serializers.CharField(read_only=True, help_text="Signs every event. Shown once.")


class OrganizationWebhook(APIView):
    """Where the organization's signed events go (customers: `delivery.ready`). Owners only.
    Events carry `X-Marketplace-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, "t.body")>`."""

    permission_classes = [IsAuthenticated, IsOrganizationOwner]
    throttle_classes = [CallerRateThrottle]

    @extend_schema(responses=WebhookSettingSerializer, summary="The organization's webhook URL")
    def get(self, request):
        # from the database, not the caller's organization (kept per process with API keys)
        organization = Organization.objects.only("webhook_url")
        url = organization.get(pk=caller_for_request(request).organization.pk).webhook_url
        return Response({"url": url})

    @extend_schema(
        request=WebhookSettingSerializer,
        responses=WebhookSettingSetSerializer,
        summary="Set the webhook URL (a new secret is returned once)",
    )
    def put(self, request):
        serializer = WebhookSettingSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        secret = services.organization_set_webhook(
            organization=caller_for_request(request).organization,
            url=serializer.validated_data["url"],
        )
        return shown_once(
            Response({"url": serializer.validated_data["url"].strip(), "secret": secret})
        )
