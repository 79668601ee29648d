"""What a customer asks for, as the order services take it: the priced part (a dataset
request, the collection plan included) and the unpriced details of an order."""

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from orders.models import EnvironmentUnit, OutputFormat
from orders.streams import DEFAULT_VIDEO_CODEC


@dataclass(frozen=True)
class DatasetRequest:
    """What a customer asks to have collected (the priced part of an order)."""

    task_type: str
    embodiment: str
    hours: Decimal
    environments: int = 1
    complexity: int | None = None  # None: the task type's default
    objects_per_environment: int = 1
    sensors: tuple[str, ...] = ()
    rush: bool = False
    # The collection plan (issue 30; models.DatasetSpec says what each means).
    environment_unit: str = EnvironmentUnit.SITE
    distinct_objects: int | None = None
    object_categories: tuple[str, ...] = ()
    demos_per_cell: int | None = None
    cell_min_share_percent: Decimal = Decimal("50")
    cell_max_share_percent: Decimal = Decimal("150")
    calibrated_cameras: bool = False

    @property
    def plan_distinct_objects(self) -> int:
        """The distinct objects the plan prices: distinct_objects, else one environment's."""
        return self.distinct_objects or self.objects_per_environment

    @classmethod
    def of(cls, values) -> "DatasetRequest":
        """From validated request fields (a mapping; absent optional ones take the defaults)."""
        return cls(
            task_type=values["task_type"],
            embodiment=values["embodiment"],
            hours=values["hours"],
            environments=values.get("environments", 1),
            complexity=values.get("complexity"),
            objects_per_environment=values.get("objects_per_environment", 1),
            sensors=tuple(values.get("sensors", ())),
            rush=values.get("rush", False),
            environment_unit=values.get("environment_unit") or EnvironmentUnit.SITE,
            distinct_objects=values.get("distinct_objects"),
            object_categories=tuple(values.get("object_categories") or ()),
            demos_per_cell=values.get("demos_per_cell"),
            cell_min_share_percent=values.get("cell_min_share_percent", Decimal(50)),
            cell_max_share_percent=values.get("cell_max_share_percent", Decimal(150)),
            calibrated_cameras=values.get("calibrated_cameras", False),
        )


@dataclass(frozen=True)
class OrderDetails:
    """The unpriced part of an order."""

    output_format: str = OutputFormat.LEROBOT_V3
    success_criterion: str = ""
    deadline: date | None = None
    pilot_hours: Decimal | None = None
    notes: str = ""
    video_codec: str = DEFAULT_VIDEO_CODEC  # the delivered videos' codec (orders/streams.py)
    # Place it although the supply check found the platform cannot cover it (a waitlisted
    # order: dispatch holds its jobs until staff release it). Without it such an order is
    # refused (409 not_coverable).
    waitlist: bool = False
