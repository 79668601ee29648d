"""The collection plan's supply-side data (issue 30): what a site can offer an order's plan.

- `SiteObject`: an object a fleet can use at a site (an episode names the ones it handled).
- `Scene`: one arrangement of a site (table, background, lighting, camera placement). A moved
  robot or camera is a new scene; `arranged_at` is when this arrangement was set up, so a
  calibration made before it is stale.
- `CameraCalibration`: one camera of one robot, calibrated at a time (intrinsics, distortion,
  extrinsics to the robot base or a named frame). Never edited: a new calibration supersedes.
- `OrderCell`: one (environment, object) cell of an order's plan. Planning creates them
  unbound; the first accepted episode of an environment binds its site (or scene), each new
  object named there binds the next free object slot. QA accrues accepted time per cell.
"""

import uuid
from decimal import Decimal

from django.db import models

from orders.models import Order


class SizeClass(models.TextChoices):
    SMALL = "small", "Small (fits in one hand)"
    MEDIUM = "medium", "Medium (two hands)"
    LARGE = "large", "Large (heavier than a robot's payload margin)"


class DistortionModel(models.TextChoices):
    """The names ROS's camera_info and OpenCV use."""

    NONE = "none", "None (rectified)"
    PLUMB_BOB = "plumb_bob", "Plumb bob (k1, k2, t1, t2, k3)"
    RATIONAL_POLYNOMIAL = "rational_polynomial", "Rational polynomial (8 coefficients)"
    EQUIDISTANT = "equidistant", "Equidistant / fisheye (k1..k4)"


class SiteObject(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    fleet = models.ForeignKey("fleets.Fleet", on_delete=models.CASCADE, related_name="+")
    site = models.ForeignKey(
        "fleets.Site", on_delete=models.CASCADE, related_name="registered_objects"
    )
    name = models.CharField(max_length=100)
    category = models.CharField(max_length=60, blank=True)  # lower-case, e.g. "mug", "tool"
    size_class = models.CharField(max_length=10, choices=SizeClass.choices, blank=True)
    photo_url = models.URLField(max_length=500, blank=True)
    notes = models.TextField(blank=True)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["site", "name"], name="site_object_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class Scene(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    fleet = models.ForeignKey("fleets.Fleet", on_delete=models.CASCADE, related_name="+")
    site = models.ForeignKey("fleets.Site", on_delete=models.CASCADE, related_name="scenes")
    name = models.CharField(max_length=100)
    table = models.CharField(max_length=200, blank=True)
    background = models.CharField(max_length=200, blank=True)
    lighting = models.CharField(max_length=200, blank=True)
    camera_placement = models.CharField(max_length=200, blank=True)
    notes = models.TextField(blank=True)
    arranged_at = models.DateTimeField()
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["site_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["site", "name"], name="scene_unique_name_in_site")
        ]

    def __str__(self) -> str:
        return self.name


class CameraCalibration(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    fleet = models.ForeignKey("fleets.Fleet", on_delete=models.CASCADE, related_name="+")
    robot = models.ForeignKey(
        "fleets.Robot", on_delete=models.CASCADE, related_name="camera_calibrations"
    )
    camera = models.CharField(max_length=64)  # the order's camera key, e.g. "wrist"
    calibrated_at = models.DateTimeField()
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    fx = models.FloatField()
    fy = models.FloatField()
    cx = models.FloatField()
    cy = models.FloatField()
    distortion_model = models.CharField(max_length=30, choices=DistortionModel.choices)
    distortion_coefficients = models.JSONField(default=list, blank=True)
    # 4x4 row-major homogeneous transform from the camera frame to `reference_frame`.
    extrinsics = models.JSONField()
    reference_frame = models.CharField(max_length=64, default="robot_base")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["robot_id", "camera", "-calibrated_at"]
        indexes = [models.Index(fields=["robot", "camera", "-calibrated_at"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(width__gt=0, height__gt=0, fx__gt=0, fy__gt=0),
                name="calibration_intrinsics_positive",
            )
        ]

    def __str__(self) -> str:
        return f"{self.camera} @ {self.calibrated_at:%Y-%m-%d %H:%M}"


class OrderCell(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    order = models.ForeignKey(Order, on_delete=models.CASCADE, related_name="cells")
    environment_index = models.PositiveIntegerField()
    object_slot = models.PositiveIntegerField()
    # Bound by the first accepted episode (site always; scene when the order counts scenes).
    site = models.ForeignKey(
        "fleets.Site", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    scene = models.ForeignKey(
        Scene, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    site_object = models.ForeignKey(
        SiteObject, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    target_seconds = models.DecimalField(max_digits=14, decimal_places=3)
    accepted_seconds = models.DecimalField(max_digits=14, decimal_places=3, default=Decimal("0"))
    accepted_episodes = models.PositiveIntegerField(default=0)
    bound_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["environment_index", "object_slot"]
        constraints = [
            models.UniqueConstraint(
                fields=["order", "environment_index", "object_slot"], name="order_cell_unique"
            ),
            models.UniqueConstraint(
                fields=["order", "environment_index", "site_object"],
                condition=models.Q(site_object__isnull=False),
                name="order_cell_object_once_per_environment",
            ),
            models.CheckConstraint(
                condition=models.Q(target_seconds__gt=0), name="order_cell_target_positive"
            ),
            models.CheckConstraint(
                condition=models.Q(accepted_seconds__gte=0), name="order_cell_accepted_nonneg"
            ),
        ]

    def __str__(self) -> str:
        return f"Cell {self.environment_index}x{self.object_slot} of {self.order_id}"
