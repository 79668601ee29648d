"""REST API for episodes (fleets) and coverage (customers). Thin: rules live in services."""

from django.db.models import Q
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from datasets import selectors
from datasets.models import Episode, EpisodeVideo
from datasets.services.episodes import (
    EpisodeRegistration,
    UploadInstructions,
    VideoDeclaration,
    episode_complete,
    episode_register,
    episode_renew_upload,
)
from fleets.models import Job
from marketplace.errors import NotFound
from marketplace.idempotency import idempotent_response
from marketplace.permissions import FleetOperatorApi, IsCustomer
from marketplace.tenancy import caller_for_request
from marketplace.throttling import CallerRateThrottle
from orders.selectors import order_list

# --- Fleets: episodes ------------------------------------------------------------------------


class VideoDeclarationSerializer(serializers.Serializer):
    camera_key = serializers.CharField(
        max_length=120, help_text="observation.images.<name>, one of the job's stream_spec cameras."
    )
    size_bytes = serializers.IntegerField(min_value=1)
    sha256 = serializers.RegexField(r"^[0-9a-f]{64}$", help_text="SHA-256 of the MP4, hex.")


class EpisodeRegisterSerializer(serializers.Serializer):
    site = serializers.UUIDField()
    robot = serializers.UUIDField()
    operator = serializers.CharField(max_length=64, help_text="A pseudonym, never a name.")
    task_instruction = serializers.CharField(max_length=500)
    success = serializers.BooleanField(help_text="The operator's label: did the task succeed?")
    fps = serializers.IntegerField(min_value=1, max_value=1000)
    size_bytes = serializers.IntegerField(min_value=1)
    sha256 = serializers.RegexField(r"^[0-9a-f]{64}$", help_text="SHA-256 of the file, hex.")
    part_sha256s = serializers.ListField(
        child=serializers.RegexField(r"^[0-9a-f]{64}$"),
        required=False,
        default=list,
        max_length=10000,
        help_text=(
            "Optional, for a file uploaded in parts (EPISODE_MULTIPART_THRESHOLD_BYTES or more):"
            " the SHA-256 (hex) of each EPISODE_MULTIPART_PART_BYTES part, in order. Each part"
            " URL is then signed with its checksum (send the x-amz-checksum-sha256 header given)"
            " and a store that keeps checksums refuses other bytes, so QA reads only what it"
            " checks instead of the whole file."
        ),
    )
    part_bytes = serializers.IntegerField(
        required=False,
        default=0,
        min_value=0,
        help_text=(
            "With part_sha256s: the part size they were computed at, which must be the"
            " platform's EPISODE_MULTIPART_PART_BYTES (else 400 naming it)."
        ),
    )
    frames = serializers.IntegerField(
        min_value=1, max_value=10_000_000, help_text="Rows of the file (frames / fps = seconds)."
    )
    objects_handled = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        default=list,
        max_length=50,
        help_text="In the order handled (duplicates dropped): the first is the object whose"
        " (environment, object) cell the episode counts in.",
    )
    scene = serializers.CharField(
        max_length=100,
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        help_text="The name of an active scene of the episode's site (POST /api/v1/fleet/scenes).",
    )
    camera_calibrations = serializers.DictField(
        child=serializers.UUIDField(),
        required=False,
        default=dict,
        help_text="{camera name: calibration id} (the robot's, of that camera); a camera of the"
        " order left out gets the robot's calibration in force (its latest made by now).",
    )
    videos = VideoDeclarationSerializer(
        many=True,
        required=False,
        default=list,
        max_length=32,
        help_text="One MP4 per camera of the job's stream spec (none when it has no cameras).",
    )

    def to_registration(self) -> EpisodeRegistration:
        data = self.validated_data
        return EpisodeRegistration(
            site_id=data["site"],
            robot_id=data["robot"],
            operator=data["operator"],
            task_instruction=data["task_instruction"],
            success=data["success"],
            fps=data["fps"],
            size_bytes=data["size_bytes"],
            sha256=data["sha256"],
            frames=data["frames"],
            objects_handled=tuple(data["objects_handled"]),
            scene=data["scene"],
            camera_calibrations=tuple(
                (camera, str(pk)) for camera, pk in data["camera_calibrations"].items()
            ),
            videos=tuple(VideoDeclaration(**video) for video in data["videos"]),
            part_sha256s=tuple(data["part_sha256s"]),
            part_bytes=data["part_bytes"],
        )


UPLOAD_METHODS = [("single", "One PUT"), ("multipart", "Parts, then complete")]


class UploadPartSerializer(serializers.Serializer):
    part_number = serializers.IntegerField()
    url = serializers.URLField()
    headers = serializers.DictField(child=serializers.CharField())


class FileUploadSerializer(serializers.Serializer):
    method = serializers.ChoiceField(choices=UPLOAD_METHODS)
    expires_at = serializers.DateTimeField()
    url = serializers.CharField(allow_blank=True, help_text="single: PUT the file here.")
    headers = serializers.DictField(
        child=serializers.CharField(), allow_null=True, help_text="single: send exactly these."
    )
    part_size = serializers.IntegerField(
        help_text="multipart: bytes per part (the last is shorter)."
    )
    parts = UploadPartSerializer(many=True)


class VideoUploadSerializer(FileUploadSerializer):
    camera_key = serializers.CharField()


class UploadSerializer(FileUploadSerializer):
    videos = VideoUploadSerializer(
        many=True, help_text="Each camera's video: its own URL(s), like the parquet's."
    )


class QAFailureSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class EpisodeVideoSerializer(serializers.ModelSerializer):
    """One camera's video: as declared, and what QA measured once it ran."""

    class Meta:
        model = EpisodeVideo
        fields = [
            "camera_key",
            "size_bytes",
            "sha256",
            "uploaded_at",
            "codec",
            "pix_fmt",
            "width",
            "height",
            "frames",
            "fps",
        ]
        read_only_fields = fields


# Content QA's verdict behind the reasons (datasets/qa_content.py): the score in [0, 1] and the
# measurements it was computed from (idle fraction, jerk, action-state correlation, flags).
CONTENT_QA_FIELDS = ("quality_score", "idle_fraction", "jerk", "qa_measurements")


class SceneRefSerializer(serializers.Serializer):
    id = serializers.UUIDField(read_only=True)
    name = serializers.CharField(read_only=True)


class CellRefSerializer(serializers.Serializer):
    environment_index = serializers.IntegerField(read_only=True)
    object_slot = serializers.IntegerField(read_only=True)


class EpisodeSerializer(serializers.ModelSerializer):
    job = serializers.UUIDField(source="job_id", read_only=True)
    site = serializers.UUIDField(source="site_id", read_only=True)
    robot = serializers.UUIDField(source="robot_id", read_only=True)
    qa_failures = QAFailureSerializer(many=True, read_only=True)
    scene = SceneRefSerializer(read_only=True, allow_null=True)
    camera_calibrations = serializers.DictField(
        child=serializers.UUIDField(),
        read_only=True,
        help_text="{camera name: calibration id} in force when the episode was registered.",
    )
    cell = CellRefSerializer(
        read_only=True,
        allow_null=True,
        help_text="The order's (environment, object) cell it counts in, once accepted.",
    )

    class Meta:
        model = Episode
        fields = [
            "id",
            "job",
            "site",
            "robot",
            "operator",
            "task_instruction",
            "success",
            "objects_handled",
            "scene",
            "camera_calibrations",
            "cell",
            "fps",
            "size_bytes",
            "sha256",
            "status",
            "qa_failures",
            "frames",
            "duration_seconds",
            *CONTENT_QA_FIELDS,
            "created_at",
            "uploaded_at",
            "decided_at",
        ]
        read_only_fields = fields


class EpisodeDetailSerializer(EpisodeSerializer):
    """One episode with its camera videos (the list leaves them out: one query per page)."""

    videos = EpisodeVideoSerializer(many=True, read_only=True)

    class Meta(EpisodeSerializer.Meta):
        fields = [*EpisodeSerializer.Meta.fields, "videos"]
        read_only_fields = fields


class EpisodeRegisteredSerializer(EpisodeSerializer):
    upload = UploadSerializer(read_only=True)

    class Meta(EpisodeSerializer.Meta):
        fields = [*EpisodeSerializer.Meta.fields, "upload"]
        read_only_fields = fields


def _file_json(instructions: UploadInstructions) -> dict:
    return {
        "method": instructions.method,
        "expires_at": instructions.expires_at,
        "url": instructions.url,
        "headers": instructions.headers,
        "part_size": instructions.part_size,
        "parts": [
            {"part_number": p.part_number, "url": p.url, "headers": p.headers}
            for p in instructions.parts
        ],
    }


def _upload_json(instructions: UploadInstructions) -> dict:
    videos = [_file_json(video) | {"camera_key": video.camera_key} for video in instructions.videos]
    return UploadSerializer(_file_json(instructions) | {"videos": videos}).data


@extend_schema_view(
    get=extend_schema(summary="Episodes of a job you hold, with their QA status and reasons"),
    post=extend_schema(
        summary="Register an episode and get where to upload it",
        request=EpisodeRegisterSerializer,
        responses={201: EpisodeRegisteredSerializer},
        parameters=[
            OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER, required=False)
        ],
    ),
)
class JobEpisodeListCreate(FleetOperatorApi, generics.ListAPIView):
    serializer_class = EpisodeSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation
            return Episode.objects.none()
        job_id = self.kwargs["job_id"]
        # Another fleet's job is a 404, not an empty list that confirms it exists. (A job
        # taken back from the caller keeps listing the episodes the caller recorded.)
        own = Q(fleet__organization=self.organization) | Q(
            episodes__fleet__organization=self.organization
        )
        if not Job.objects.filter(own, pk=job_id).exists():
            raise NotFound("Job not found.")
        return selectors.episodes_of_fleet(organization=self.organization).filter(job_id=job_id)

    def post(self, request, job_id):
        organization = self.organization

        def register() -> Response:
            serializer = EpisodeRegisterSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            episode, instructions = episode_register(
                organization=organization, job_id=job_id, registration=serializer.to_registration()
            )
            body = EpisodeSerializer(episode).data | {"upload": _upload_json(instructions)}
            return Response(body, status=status.HTTP_201_CREATED)

        return idempotent_response(
            request=request,
            organization=organization,
            scope=f"episodes.register:{job_id}",
            handler=register,
        )


class EpisodeDetail(FleetOperatorApi, generics.RetrieveAPIView):
    serializer_class = EpisodeDetailSerializer

    def get_queryset(self):
        return selectors.episodes_of_fleet(organization=self.organization)


class EpisodeRenewUpload(FleetOperatorApi, APIView):
    @extend_schema(
        request=None, responses=UploadSerializer, summary="New upload URL(s) to a fresh key"
    )
    def post(self, request, pk):
        instructions = episode_renew_upload(organization=self.organization, episode_id=pk)
        return Response(_upload_json(instructions))


class CompletedPartSerializer(serializers.Serializer):
    part_number = serializers.IntegerField(min_value=1, max_value=10000)
    etag = serializers.CharField(max_length=200)


class CompletedVideoSerializer(serializers.Serializer):
    camera_key = serializers.CharField(max_length=120)
    parts = CompletedPartSerializer(many=True, max_length=10000)


class EpisodeCompleteSerializer(serializers.Serializer):
    parts = CompletedPartSerializer(many=True, required=False, max_length=10000)
    videos = CompletedVideoSerializer(
        many=True, required=False, max_length=32, help_text="Multipart videos: their parts."
    )


class EpisodeComplete(FleetOperatorApi, APIView):
    @extend_schema(
        request=EpisodeCompleteSerializer,
        responses=EpisodeSerializer,
        summary="The bytes are uploaded: queue QA (multipart: send the parts' ETags)",
    )
    def post(self, request, pk):
        serializer = EpisodeCompleteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        episode = episode_complete(
            organization=self.organization,
            episode_id=pk,
            parts=serializer.validated_data.get("parts"),
            video_parts={
                video["camera_key"]: video["parts"]
                for video in serializer.validated_data.get("videos", [])
            },
        )
        return Response(EpisodeSerializer(episode).data)


# --- Customers: coverage ---------------------------------------------------------------------


class EnvironmentCoverageSerializer(serializers.Serializer):
    site = serializers.UUIDField()
    site_name = serializers.CharField()
    site_kind = serializers.CharField()
    accepted_hours = serializers.DecimalField(max_digits=12, decimal_places=3)
    target_hours = serializers.DecimalField(max_digits=12, decimal_places=2, allow_null=True)
    episodes = serializers.IntegerField()


class SiteKindCoverageSerializer(serializers.Serializer):
    site_kind = serializers.CharField()
    accepted_hours = serializers.DecimalField(max_digits=12, decimal_places=3)
    sites = serializers.IntegerField()


class OperatorFiguresSerializer(serializers.Serializer):
    operator = serializers.CharField()
    episodes_checked = serializers.IntegerField()
    episodes_accepted = serializers.IntegerField()
    acceptance_rate = serializers.FloatField()
    success_rate = serializers.FloatField(allow_null=True)
    accepted_hours = serializers.DecimalField(max_digits=12, decimal_places=3)
    mean_episode_seconds = serializers.DecimalField(
        max_digits=12, decimal_places=1, allow_null=True
    )


class CellCoverageSerializer(serializers.Serializer):
    """One (environment, object) cell of an order planned by cell (issue 30)."""

    environment_index = serializers.IntegerField()
    object_slot = serializers.IntegerField()
    site = serializers.CharField(allow_null=True, help_text="The bound site's pseudonym.")
    scene = serializers.CharField(allow_null=True, help_text="The bound scene's name.")
    object = serializers.CharField(allow_null=True, help_text="The bound object's name.")
    target_seconds = serializers.DecimalField(max_digits=14, decimal_places=3)
    minimum_seconds = serializers.DecimalField(max_digits=14, decimal_places=3)
    maximum_seconds = serializers.DecimalField(max_digits=14, decimal_places=3)
    accepted_seconds = serializers.DecimalField(max_digits=14, decimal_places=3)
    accepted_episodes = serializers.IntegerField()
    state = serializers.ChoiceField(choices=["short", "ok", "full"])


class CoverageSerializer(serializers.Serializer):
    ordered_hours = serializers.DecimalField(max_digits=12, decimal_places=2)
    accepted_hours = serializers.DecimalField(max_digits=12, decimal_places=3)
    environments_ordered = serializers.IntegerField()
    environments = EnvironmentCoverageSerializer(many=True)
    site_kinds = SiteKindCoverageSerializer(many=True)
    objects = serializers.ListField(child=serializers.CharField())
    operators = OperatorFiguresSerializer(many=True)
    episodes = serializers.DictField(child=serializers.IntegerField())
    qa_rejections = serializers.DictField(child=serializers.IntegerField())
    success_rate = serializers.FloatField(allow_null=True)
    cells = CellCoverageSerializer(
        many=True, help_text="The plan's cells (orders planned by cell; empty otherwise)."
    )


class OrderCoverage(APIView):
    permission_classes = [IsAuthenticated, IsCustomer]
    throttle_classes = [CallerRateThrottle]

    @extend_schema(
        responses=CoverageSerializer,
        summary="Coverage of an order: hours per environment, operators, QA",
    )
    def get(self, request, pk):
        order = (
            order_list(organization=caller_for_request(request).organization).filter(pk=pk).first()
        )
        if order is None:
            raise NotFound("Order not found.")
        return Response(CoverageSerializer(selectors.order_coverage(order=order)).data)


class CustomerEpisodeSerializer(serializers.ModelSerializer):
    """An episode as the customer sees it: the operator by pseudonym only, no storage keys."""

    site = serializers.UUIDField(source="site_id", read_only=True)
    qa_failures = QAFailureSerializer(many=True, read_only=True)

    class Meta:
        model = Episode
        fields = [
            "id",
            "site",
            "operator",
            "task_instruction",
            "success",
            "objects_handled",
            "fps",
            "status",
            "qa_failures",
            "frames",
            "duration_seconds",
            *CONTENT_QA_FIELDS,
            "decided_at",
        ]
        read_only_fields = fields


class OrderEpisodeList(generics.ListAPIView):
    """GET /orders/<id>/episodes[?status=&reason=]: the order's checked episodes, newest first."""

    permission_classes = [IsAuthenticated, IsCustomer]
    throttle_classes = [CallerRateThrottle]
    serializer_class = CustomerEpisodeSerializer

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator
            return Episode.objects.none()
        order = (
            order_list(organization=caller_for_request(self.request).organization)
            .filter(pk=self.kwargs["pk"])
            .first()
        )
        if order is None:
            raise NotFound("Order not found.")
        episodes = selectors.order_episodes_for_customer(
            order=order, status=self.request.query_params.get("status", "")
        )
        reason = self.request.query_params.get("reason", "")
        if reason:  # JSONB containment: the rejected ones with this QA reason
            episodes = episodes.filter(
                status=Episode.Status.REJECTED, qa_failures__contains=[{"code": reason}]
            )
        return episodes
