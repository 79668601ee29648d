"""The collection plan's registry (issue 30): the objects a fleet can use at a site, the
scenes (arrangements) of a site and its robots' camera calibrations; and what an episode
names of them at registration (its scene, the calibration in force per camera).

Tenancy: a fleet operator sees and changes only its own sites' and robots' rows; another
organization's site, robot, object, scene or calibration is a 404, as if it did not exist.

Names are identities: an object's or a scene's name (1-100 characters, trimmed, no control
characters) is unique in its site and never changes; a second one is 409 `name_taken`. A
moved robot or camera is a new scene (a scene's arrangement is never edited), and a
recalibration is a new calibration (never edited).

A calibration must describe a real pinhole camera (400 `invalid_calibration` otherwise):
resolution 1..16384 px, focal lengths > 0, the principal point inside the image, the
distortion model's exact coefficient count, every number finite, and extrinsics a 4x4 rigid
transform (last row 0 0 0 1, rotation orthonormal within 1e-3 with determinant +1). It is
dated no later than 5 minutes from now (clocks drift; the future does not calibrate).
"""

import math
import re
import uuid
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction
from django.utils import timezone

from fleets.collection_selectors import (
    calibrations_in_force,
    scenes_for,
    site_objects_for,
)
from fleets.error_codes import ErrorCode
from fleets.models import (
    CameraCalibration,
    DistortionModel,
    Robot,
    Scene,
    Site,
    SiteObject,
    SizeClass,
)
from marketplace.errors import Conflict, NotFound, ServiceError, invalid
from marketplace.models import Organization
from orders.streams import CAMERA_KEY_PREFIX

NAME_MAX = 100
CATEGORY_MAX = 60
URL_MAX = 500
SCENE_TEXT_MAX = 200
NOTES_MAX = 5000
MAX_PIXELS = 16384  # per side
FUTURE_TOLERANCE = timedelta(minutes=5)
ROTATION_TOLERANCE = 1e-3
# A camera's name, as the order's stream spec names it (`observation.images.<name>`); the key
# itself is accepted too and stored as the name.
CAMERA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
REFERENCE_FRAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,63}$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
COEFFICIENTS = {
    DistortionModel.NONE: 0,
    DistortionModel.PLUMB_BOB: 5,
    DistortionModel.RATIONAL_POLYNOMIAL: 8,
    DistortionModel.EQUIDISTANT: 4,
}
OBJECT_EDITABLE = {"category", "size_class", "photo_url", "notes", "active"}
SCENE_EDITABLE = {"notes", "active"}
_url_validator = URLValidator(schemes=["http", "https"])


# --- Field rules ---------------------------------------------------------------------------


def clean_name(value, field: str = "name") -> str:
    """An object's or scene's name: 1-100 characters once trimmed, no control characters."""
    if not isinstance(value, str):
        raise invalid(field, "A name is text.")
    name = value.strip()
    if not 1 <= len(name) <= NAME_MAX:
        raise invalid(field, f"A name of 1-{NAME_MAX} characters.")
    if CONTROL.search(name):
        raise invalid(field, "A name cannot hold control characters (tabs, line breaks).")
    return name


def _text(value, field: str, max_length: int, *, lines: bool = False) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise invalid(field, "Text expected.")
    text = value.strip()
    if len(text) > max_length:
        raise invalid(field, f"At most {max_length} characters.")
    bad = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]") if lines else CONTROL
    if bad.search(text):
        raise invalid(field, "Control characters are not allowed.")
    return text


def _category(value) -> str:
    return _text(value, "category", CATEGORY_MAX).lower()


def _size_class(value) -> str:
    if value in (None, ""):
        return ""
    if value not in SizeClass.values:
        raise invalid("size_class", f"One of {', '.join(SizeClass.values)} (or empty).")
    return value


def _photo_url(value) -> str:
    url = _text(value, "photo_url", URL_MAX)
    if url:
        try:
            _url_validator(url)
        except ValidationError:
            raise invalid("photo_url", "An http or https URL.") from None
    return url


def _moment(value, field: str, *, default_now: bool = False) -> datetime:
    now = timezone.now()
    if value is None and default_now:
        return now
    if not isinstance(value, datetime) or timezone.is_naive(value):
        raise invalid(field, "A date and time with its time zone (ISO 8601).")
    if value > now + FUTURE_TOLERANCE:
        raise invalid(field, "Cannot be in the future (more than 5 minutes from now).")
    return value


def camera_name(value, field: str = "camera") -> str:
    """`wrist` or `observation.images.wrist` -> `wrist`; anything else is refused."""
    if not isinstance(value, str):
        raise invalid(field, "A camera name, e.g. wrist.")
    name = value.strip()
    if name.startswith(CAMERA_KEY_PREFIX):
        name = name[len(CAMERA_KEY_PREFIX) :]
    if not CAMERA_NAME.match(name):
        raise invalid(
            field,
            "A camera name as the order's streams name it (observation.images.<name>): 1-64"
            " letters, digits, '_' or '-', e.g. wrist.",
        )
    return name


# --- Tenancy -------------------------------------------------------------------------------


def _own_site(*, organization: Organization, site_id, lock: bool = False) -> Site:
    sites = Site.objects.filter(fleet__organization=organization)
    if lock:
        sites = sites.select_for_update(of=("self",))
    site = sites.filter(pk=site_id).first() if site_id else None
    if site is None:
        raise NotFound("Site not found.", fields={"site": ["Site not found."]})
    return site


def _own_robot(*, organization: Organization, robot_id) -> Robot:
    robot = Robot.objects.filter(pk=robot_id, fleet__organization=organization).first()
    if robot is None:
        raise NotFound("Robot not found.", fields={"robot": ["Robot not found."]})
    return robot


def _name_taken(what: str, name: str) -> Conflict:
    message = f"This site already has {what} named {name!r}: names are unique in a site."
    return Conflict(message, code=ErrorCode.NAME_TAKEN, fields={"name": [message]})


def _changes_allowed(changes: dict, allowed: set, why: str) -> None:
    refused = sorted(set(changes) - allowed)
    if refused:
        raise ServiceError(
            f"{', '.join(refused)} cannot be changed: {why}",
            fields={name: [f"Cannot be changed: {why}"] for name in refused},
        )


# --- Objects -------------------------------------------------------------------------------


def site_objects_sync(*, site: Site, names) -> int:
    """The site's legacy `objects_available` names as SiteObject rows: missing ones are
    created (active, no details), existing ones left as they are, none deleted. Returns how
    many were created. The caller holds the site (created or locked)."""
    wanted = list(dict.fromkeys(n for n in names if 1 <= len(n) <= NAME_MAX))
    existing = set(
        SiteObject.objects.filter(site=site, name__in=wanted).values_list("name", flat=True)
    )
    missing = [name for name in wanted if name not in existing]
    SiteObject.objects.bulk_create(
        [SiteObject(fleet_id=site.fleet_id, site=site, name=name) for name in missing],
        ignore_conflicts=True,
    )
    return len(missing)


def site_object_create(
    *,
    organization: Organization,
    site_id,
    name: str,
    category: str = "",
    size_class: str = "",
    photo_url: str = "",
    notes: str = "",
    active: bool = True,
) -> SiteObject:
    fields = {
        "name": clean_name(name),
        "category": _category(category),
        "size_class": _size_class(size_class),
        "photo_url": _photo_url(photo_url),
        "notes": _text(notes, "notes", NOTES_MAX, lines=True),
        "active": bool(active),
    }
    with transaction.atomic():
        site = _own_site(organization=organization, site_id=site_id, lock=True)
        if SiteObject.objects.filter(site=site, name=fields["name"]).exists():
            raise _name_taken("an object", fields["name"])
        try:
            with transaction.atomic():
                return SiteObject.objects.create(fleet_id=site.fleet_id, site=site, **fields)
        except IntegrityError:  # a sync of objects_available outside the site's lock
            raise _name_taken("an object", fields["name"]) from None


def site_object_update(*, organization: Organization, object_id, changes: dict) -> SiteObject:
    _changes_allowed(
        changes, OBJECT_EDITABLE, "an object's name is its identity; register a new object."
    )
    cleaners = {
        "category": _category,
        "size_class": _size_class,
        "photo_url": _photo_url,
        "notes": lambda v: _text(v, "notes", NOTES_MAX, lines=True),
        "active": bool,
    }
    fields = {name: cleaners[name](value) for name, value in changes.items()}
    with transaction.atomic():
        found = (
            site_objects_for(organization=organization)
            .select_for_update(of=("self",))
            .filter(pk=object_id)
            .first()
        )
        if found is None:
            raise NotFound("Object not found.")
        for name, value in fields.items():
            setattr(found, name, value)
        if fields:
            found.save(update_fields=list(fields))
    return found


# --- Scenes --------------------------------------------------------------------------------


def scene_create(
    *,
    organization: Organization,
    site_id,
    name: str,
    table: str = "",
    background: str = "",
    lighting: str = "",
    camera_placement: str = "",
    notes: str = "",
    arranged_at: datetime | None = None,
    active: bool = True,
) -> Scene:
    fields = {
        "name": clean_name(name),
        "table": _text(table, "table", SCENE_TEXT_MAX),
        "background": _text(background, "background", SCENE_TEXT_MAX),
        "lighting": _text(lighting, "lighting", SCENE_TEXT_MAX),
        "camera_placement": _text(camera_placement, "camera_placement", SCENE_TEXT_MAX),
        "notes": _text(notes, "notes", NOTES_MAX, lines=True),
        "arranged_at": _moment(arranged_at, "arranged_at", default_now=True),
        "active": bool(active),
    }
    with transaction.atomic():
        site = _own_site(organization=organization, site_id=site_id, lock=True)
        if Scene.objects.filter(site=site, name=fields["name"]).exists():
            raise _name_taken("a scene", fields["name"])
        try:
            with transaction.atomic():
                return Scene.objects.create(fleet_id=site.fleet_id, site=site, **fields)
        except IntegrityError:  # the unique constraint, should a writer skip the site's lock
            raise _name_taken("a scene", fields["name"]) from None


def scene_update(*, organization: Organization, scene_id, changes: dict) -> Scene:
    _changes_allowed(
        changes,
        SCENE_EDITABLE,
        "a moved robot or camera, or a new table, background or light, is a new scene:"
        " register one (POST /api/v1/fleet/scenes).",
    )
    fields = {}
    if "notes" in changes:
        fields["notes"] = _text(changes["notes"], "notes", NOTES_MAX, lines=True)
    if "active" in changes:
        fields["active"] = bool(changes["active"])
    with transaction.atomic():
        scene = (
            scenes_for(organization=organization)
            .select_for_update(of=("self",))
            .filter(pk=scene_id)
            .first()
        )
        if scene is None:
            raise NotFound("Scene not found.")
        for name, value in fields.items():
            setattr(scene, name, value)
        if fields:
            scene.save(update_fields=list(fields))
    return scene


# --- Calibrations --------------------------------------------------------------------------


def _bad_calibration(field: str, message: str) -> ServiceError:
    return invalid(field, message, ErrorCode.INVALID_CALIBRATION)


def _finite(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad_calibration(field, "A number.")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond any float
        number = math.inf
    if not math.isfinite(number):
        raise _bad_calibration(field, "A finite number (not NaN or infinite).")
    return number


def _size(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PIXELS:
        raise _bad_calibration(field, f"A whole number of pixels from 1 to {MAX_PIXELS}.")
    return value


def _coefficients(model, values) -> list[float]:
    if not isinstance(model, str) or model not in COEFFICIENTS:
        raise _bad_calibration(
            "distortion_model", f"One of {', '.join(str(m) for m in COEFFICIENTS)}."
        )
    if not isinstance(values, list | tuple):
        raise _bad_calibration("distortion_coefficients", "A list of numbers.")
    expected = COEFFICIENTS[model]
    if len(values) != expected:
        raise _bad_calibration(
            "distortion_coefficients",
            f"The {model} model has exactly {expected} coefficients; {len(values)} given.",
        )
    return [_finite(value, "distortion_coefficients") for value in values]


def _extrinsics(matrix) -> list[list[float]]:
    """A 4x4 rigid transform: rows of finite numbers, last row 0 0 0 1, its rotation part
    orthonormal (R R^T = I within 1e-3) and proper (det = +1 within 1e-3)."""
    shape = "A 4x4 matrix (four rows of four numbers), row-major."
    if not isinstance(matrix, list | tuple) or len(matrix) != 4:
        raise _bad_calibration("extrinsics", shape)
    rows = []
    for row in matrix:
        if not isinstance(row, list | tuple) or len(row) != 4:
            raise _bad_calibration("extrinsics", shape)
        rows.append([_finite(value, "extrinsics") for value in row])
    if rows[3] != [0.0, 0.0, 0.0, 1.0]:
        raise _bad_calibration("extrinsics", "The last row of a rigid transform is 0 0 0 1.")
    rotation = [row[:3] for row in rows[:3]]
    for i in range(3):
        for j in range(3):
            dot = sum(rotation[i][k] * rotation[j][k] for k in range(3))
            if abs(dot - (1.0 if i == j else 0.0)) > ROTATION_TOLERANCE:
                raise _bad_calibration(
                    "extrinsics",
                    "The rotation part (upper-left 3x3) is not orthonormal (R R^T must be the"
                    " identity within 1e-3): no scale or shear in a camera's pose.",
                )
    (a, b, c), (d, e, f), (g, h, i) = rotation
    determinant = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
    if abs(determinant - 1.0) > ROTATION_TOLERANCE:
        raise _bad_calibration(
            "extrinsics", "The rotation part is a reflection (determinant -1), not a rotation."
        )
    return rows


def calibration_create(
    *,
    organization: Organization,
    robot_id,
    camera: str,
    calibrated_at: datetime,
    width: int,
    height: int,
    fx: float,
    fy: float,
    cx: float,
    cy: float,
    distortion_model: str,
    distortion_coefficients,
    extrinsics,
    reference_frame: str = "robot_base",
) -> CameraCalibration:
    fields = {
        "camera": camera_name(camera),
        "calibrated_at": _moment(calibrated_at, "calibrated_at"),
        "width": _size(width, "width"),
        "height": _size(height, "height"),
    }
    for name, value in (("fx", fx), ("fy", fy), ("cx", cx), ("cy", cy)):
        fields[name] = _finite(value, name)
    for name in ("fx", "fy"):
        if fields[name] <= 0:
            raise _bad_calibration(name, "A focal length in pixels, more than 0.")
    if not 0 <= fields["cx"] <= fields["width"]:
        raise _bad_calibration("cx", "The principal point lies in the image: 0 <= cx <= width.")
    if not 0 <= fields["cy"] <= fields["height"]:
        raise _bad_calibration("cy", "The principal point lies in the image: 0 <= cy <= height.")
    fields["distortion_model"] = distortion_model
    fields["distortion_coefficients"] = _coefficients(distortion_model, distortion_coefficients)
    fields["extrinsics"] = _extrinsics(extrinsics)
    frame = reference_frame.strip() if isinstance(reference_frame, str) else None
    if frame is None or not REFERENCE_FRAME.match(frame):
        raise invalid(
            "reference_frame", "A frame name of 1-64 letters, digits, '_', '.', '/' or '-'."
        )
    fields["reference_frame"] = frame
    robot = _own_robot(organization=organization, robot_id=robot_id)
    return CameraCalibration.objects.create(fleet_id=robot.fleet_id, robot=robot, **fields)


# --- What an episode names -----------------------------------------------------------------


def scene_for_episode(*, site_id, name) -> Scene | None:
    """The active scene of the episode's site named `name` (None: the episode names none)."""
    if name is None or (isinstance(name, str) and not name.strip()):
        return None
    if not isinstance(name, str):
        raise invalid("scene", "A scene's name.")
    scene = Scene.objects.filter(site_id=site_id, name=name.strip(), active=True).first()
    if scene is None:
        raise invalid(
            "scene",
            f"{name.strip()!r} is not an active scene of this site (register it with"
            " POST /api/v1/fleet/scenes).",
        )
    return scene


def calibrations_for_episode(*, robot_id, cameras, given: dict) -> dict[str, str]:
    """{camera name: calibration id} for an episode of `robot_id` recording `cameras` (the
    order's camera names). A camera the fleet names must be one of the order's and its
    calibration the robot's, of that camera; a camera left out gets the calibration in force
    (the robot's latest for it, calibrated by now), or none."""
    if not isinstance(given, dict):
        raise invalid("camera_calibrations", "An object of camera name -> calibration id.")
    ordered = list(cameras)
    named: dict[str, uuid.UUID] = {}
    for raw_camera, calibration_id in given.items():
        camera = camera_name(raw_camera, "camera_calibrations")
        if camera not in ordered:
            wanted = ", ".join(ordered) if ordered else "none"
            raise invalid(
                "camera_calibrations", f"{camera!r} is not a camera of the order ({wanted})."
            )
        if camera in named:
            raise invalid("camera_calibrations", f"{camera!r} is named twice.")
        named[camera] = _calibration_id(calibration_id)
    if named:
        found = dict(
            CameraCalibration.objects.filter(
                pk__in=list(named.values()), robot_id=robot_id
            ).values_list("pk", "camera")
        )
        for camera, calibration_id in named.items():
            if found.get(calibration_id) != camera:
                raise invalid(
                    "camera_calibrations",
                    f"{calibration_id} is not a calibration of this robot's {camera!r} camera.",
                )
    missing = [camera for camera in ordered if camera not in named]
    if missing:
        in_force = calibrations_in_force(robot_id=robot_id, at=timezone.now()).filter(
            camera__in=missing
        )
        in_force = in_force.values_list("camera", "pk")
        named.update(dict(in_force))
    return {camera: str(named[camera]) for camera in ordered if camera in named}


def _calibration_id(value) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except ValueError:
        raise invalid("camera_calibrations", f"{value!r} is not a calibration id.") from None
