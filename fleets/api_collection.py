"""Fleet API for the collection plan's registry (issue 30): a site's objects and scenes, a
robot's camera calibrations. Thin: every rule is fleets/services/collection.py's; another
organization's site, robot or row is a 404. Lists are paginated like every list (newest
first, `?page_size=`, cursor links)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.response import Response

from fleets import collection_selectors
from fleets.models import CameraCalibration, Scene, SiteObject
from fleets.services import collection
from marketplace.permissions import FleetOperatorApi

# Generous shapes only: lengths and values are the service's to check (one message each).
TEXT = {"required": False, "default": "", "allow_blank": True, "trim_whitespace": False}


def _uuid_param(request, name: str):
    raw = request.query_params.get(name)
    if not raw:
        return None
    try:
        return serializers.UUIDField().to_internal_value(raw)
    except serializers.ValidationError:
        raise serializers.ValidationError({name: ["Must be a valid UUID."]}) from None


def _active_param(request):
    raw = request.query_params.get("active")
    if raw in (None, ""):
        return None
    if raw not in ("true", "false"):
        raise serializers.ValidationError({"active": ["true or false."]})
    return raw == "true"


def _editable_changes(request, serializer_class, editable: set) -> dict:
    """The PATCH body's fields: validated shapes for the editable ones, the others as sent
    (the service refuses them by name, saying why)."""
    serializer = serializer_class(data=request.data, partial=True)
    serializer.is_valid(raise_exception=True)
    changes = {key: value for key, value in request.data.items() if key not in editable}
    changes.update(serializer.validated_data)
    return changes


# --- Objects -------------------------------------------------------------------------------


class SiteObjectSerializer(serializers.ModelSerializer):
    site = serializers.UUIDField(source="site_id")
    name = serializers.CharField(
        max_length=1000, help_text="1-100 characters, unique in the site; never changes."
    )
    category = serializers.CharField(max_length=1000, **TEXT, help_text="e.g. mug, tool")
    size_class = serializers.CharField(
        max_length=20, **TEXT, help_text="small, medium or large (or empty)."
    )
    photo_url = serializers.CharField(max_length=2000, **TEXT, help_text="http or https.")
    notes = serializers.CharField(max_length=10000, **TEXT)
    active = serializers.BooleanField(default=True)

    class Meta:
        model = SiteObject
        fields = [
            "id",
            "site",
            "name",
            "category",
            "size_class",
            "photo_url",
            "notes",
            "active",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]


class SiteObjectChangeSerializer(serializers.Serializer):
    category = serializers.CharField(max_length=1000, allow_blank=True, trim_whitespace=False)
    size_class = serializers.CharField(max_length=20, allow_blank=True)
    photo_url = serializers.CharField(max_length=2000, allow_blank=True)
    notes = serializers.CharField(max_length=10000, allow_blank=True, trim_whitespace=False)
    active = serializers.BooleanField()


SITE_FILTERS = [
    OpenApiParameter("site", str, description="Only this site's rows."),
    OpenApiParameter("active", bool, description="true or false."),
]


class _SiteRowListCreate(FleetOperatorApi, generics.ListCreateAPIView):
    """A fleet's rows of its sites (objects or scenes): listed with ?site= and ?active=,
    created at one of its sites."""

    rows_for = None  # the selector of the fleet operator's rows
    create_row = None  # the service creating one

    def get_queryset(self):
        rows = self.rows_for(organization=self.organization)
        site, active = _uuid_param(self.request, "site"), _active_param(self.request)
        if site is not None:
            rows = rows.filter(site_id=site)
        if active is not None:
            rows = rows.filter(active=active)
        return rows

    def post(self, request):
        serializer = self.serializer_class(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        row = self.create_row(organization=self.organization, site_id=data.pop("site_id"), **data)
        return Response(self.serializer_class(row).data, status=status.HTTP_201_CREATED)


@extend_schema_view(get=extend_schema(parameters=SITE_FILTERS))
class SiteObjectListCreate(_SiteRowListCreate):
    serializer_class = SiteObjectSerializer
    rows_for = staticmethod(collection_selectors.site_objects_for)
    create_row = staticmethod(collection.site_object_create)


class SiteObjectDetail(FleetOperatorApi, generics.RetrieveAPIView):
    serializer_class = SiteObjectSerializer

    def get_queryset(self):
        return collection_selectors.site_objects_for(organization=self.organization)

    @extend_schema(request=SiteObjectChangeSerializer, responses=SiteObjectSerializer)
    def patch(self, request, pk):
        changes = _editable_changes(request, SiteObjectChangeSerializer, collection.OBJECT_EDITABLE)
        found = collection.site_object_update(
            organization=self.organization, object_id=pk, changes=changes
        )
        return Response(SiteObjectSerializer(found).data)


# --- Scenes --------------------------------------------------------------------------------


class SceneSerializer(serializers.ModelSerializer):
    site = serializers.UUIDField(source="site_id")
    name = serializers.CharField(
        max_length=1000, help_text="1-100 characters, unique in the site; never changes."
    )
    table = serializers.CharField(max_length=1000, **TEXT)
    background = serializers.CharField(max_length=1000, **TEXT)
    lighting = serializers.CharField(max_length=1000, **TEXT)
    camera_placement = serializers.CharField(max_length=1000, **TEXT)
    notes = serializers.CharField(max_length=10000, **TEXT)
    arranged_at = serializers.DateTimeField(
        required=False,
        default=None,
        help_text="When this arrangement was set up (default: now); a calibration made before"
        " it is stale.",
    )
    active = serializers.BooleanField(default=True)

    class Meta:
        model = Scene
        fields = [
            "id",
            "site",
            "name",
            "table",
            "background",
            "lighting",
            "camera_placement",
            "notes",
            "arranged_at",
            "active",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]


class SceneChangeSerializer(serializers.Serializer):
    notes = serializers.CharField(max_length=10000, allow_blank=True, trim_whitespace=False)
    active = serializers.BooleanField()


@extend_schema_view(get=extend_schema(parameters=SITE_FILTERS))
class SceneListCreate(_SiteRowListCreate):
    serializer_class = SceneSerializer
    rows_for = staticmethod(collection_selectors.scenes_for)
    create_row = staticmethod(collection.scene_create)


class SceneDetail(FleetOperatorApi, generics.RetrieveAPIView):
    serializer_class = SceneSerializer

    def get_queryset(self):
        return collection_selectors.scenes_for(organization=self.organization)

    @extend_schema(request=SceneChangeSerializer, responses=SceneSerializer)
    def patch(self, request, pk):
        changes = _editable_changes(request, SceneChangeSerializer, collection.SCENE_EDITABLE)
        scene = collection.scene_update(
            organization=self.organization, scene_id=pk, changes=changes
        )
        return Response(SceneSerializer(scene).data)


# --- Calibrations --------------------------------------------------------------------------


class CalibrationSerializer(serializers.ModelSerializer):
    robot = serializers.UUIDField(source="robot_id")
    camera = serializers.CharField(
        max_length=200,
        help_text="The camera's name in the order's streams (wrist for observation.images.wrist;"
        " the full key is accepted too).",
    )
    calibrated_at = serializers.DateTimeField()
    width = serializers.IntegerField(help_text="Pixels, 1-16384.")
    height = serializers.IntegerField(help_text="Pixels, 1-16384.")
    fx = serializers.FloatField(help_text="Focal length in pixels, > 0.")
    fy = serializers.FloatField(help_text="Focal length in pixels, > 0.")
    cx = serializers.FloatField(help_text="Principal point, 0..width.")
    cy = serializers.FloatField(help_text="Principal point, 0..height.")
    distortion_model = serializers.CharField(
        max_length=40, help_text="none, plumb_bob, rational_polynomial or equidistant."
    )
    distortion_coefficients = serializers.JSONField(
        help_text="0 numbers for none, 5 for plumb_bob, 8 for rational_polynomial, 4 for"
        " equidistant."
    )
    extrinsics = serializers.JSONField(
        help_text="4x4 row-major transform from the camera frame to reference_frame: last row"
        " 0 0 0 1, rotation orthonormal."
    )
    reference_frame = serializers.CharField(max_length=200, required=False, default="robot_base")

    class Meta:
        model = CameraCalibration
        fields = [
            "id",
            "robot",
            "camera",
            "calibrated_at",
            "width",
            "height",
            "fx",
            "fy",
            "cx",
            "cy",
            "distortion_model",
            "distortion_coefficients",
            "extrinsics",
            "reference_frame",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]


@extend_schema_view(
    get=extend_schema(
        parameters=[
            OpenApiParameter("robot", str, description="Only this robot's calibrations."),
            OpenApiParameter("camera", str, description="Only this camera's (name or key)."),
        ]
    )
)
class CalibrationListCreate(FleetOperatorApi, generics.ListCreateAPIView):
    """Never edited: a recalibration is a new row (the newest made by an episode's time is
    the one in force)."""

    serializer_class = CalibrationSerializer

    def get_queryset(self):
        rows = collection_selectors.calibrations_for(organization=self.organization)
        robot = _uuid_param(self.request, "robot")
        if robot is not None:
            rows = rows.filter(robot_id=robot)
        camera = self.request.query_params.get("camera")
        if camera:
            rows = rows.filter(camera=collection.camera_name(camera))
        return rows

    def post(self, request):
        serializer = CalibrationSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        calibration = collection.calibration_create(
            organization=self.organization, robot_id=data.pop("robot_id"), **data
        )
        return Response(CalibrationSerializer(calibration).data, status=status.HTTP_201_CREATED)


class CalibrationDetail(FleetOperatorApi, generics.RetrieveAPIView):
    serializer_class = CalibrationSerializer

    def get_queryset(self):
        return collection_selectors.calibrations_for(organization=self.organization)
