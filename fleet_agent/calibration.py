"""Camera calibrations (issue 30): checked before they are sent, and made up for simulated robots.

A calibration is what `POST /api/v1/fleet/calibrations` takes for one camera of one robot:

    {"calibrated_at": "2026-12-01T09:30:00+00:00",   # ISO 8601 with a time zone
     "width": 640, "height": 480,                    # the resolution the intrinsics are for (px)
     "fx": 462.3, "fy": 462.3, "cx": 319.5, "cy": 239.5,
     "distortion_model": "plumb_bob",                # none | plumb_bob | rational_polynomial
                                                     # | equidistant (ROS camera_info's names)
     "distortion_coefficients": [0.1, -0.2, 0.0, 0.0, 0.05],   # 0 / 5 / 8 / 4 numbers
     "extrinsics": [[...], [...], [...], [0, 0, 0, 1]],        # 4x4 camera -> reference frame
     "reference_frame": "robot_base"}                # optional (default robot_base)

`check_calibration(data, where)` refuses anything else with a message naming the key (an
unknown key names the known ones), the same rules the platform applies, so an importer's
calibration file fails before any recording is sent. `simulated_calibration(...)` makes the
reference agent's: a pinhole of a typical field of view for the resolution, small plumb-bob
distortion, and a look-at pose (or a wrist mount) whose rotation is orthonormal.
"""

from __future__ import annotations

import difflib
import math
import random
from datetime import UTC, datetime, timedelta

DISTORTION_COEFFICIENTS = {"none": 0, "plumb_bob": 5, "rational_polynomial": 8, "equidistant": 4}
REQUIRED = (
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
)
OPTIONAL = ("reference_frame", "camera")
KEYS = REQUIRED + OPTIONAL
ORTHONORMAL_TOLERANCE = 1e-3
MAX_PIXELS = 16384  # a side longer than any camera the platform records
FRAME_NAME_MAX = 64
WRIST_CAMERAS = ("wrist",)  # mounted on the end effector: extrinsics to the flange


class CalibrationError(ValueError):
    """A calibration the platform would refuse; the message names the key."""


def unknown_keys_message(where: str, unknown: list[str], known) -> str:
    """`where: unknown key 'fxx' (did you mean fx?); known keys: ...`."""
    key = sorted(unknown)[0]
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    prefix = f"{where}: " if where else ""
    return f"{prefix}unknown key {key!r}{hint}; known keys: {', '.join(sorted(known))}"


def _number(data: dict, key: str, where: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CalibrationError(f"{where}{key}: a finite number")
    return float(value)


def check_calibration(data, where: str = "", *, now: datetime | None = None) -> dict:
    """The calibration as the API takes it (without `camera`), or CalibrationError."""
    prefix = f"{where}: " if where else ""
    if not isinstance(data, dict):
        raise CalibrationError(f"{prefix}a JSON object of {', '.join(REQUIRED)}")
    unknown = [key for key in data if key not in KEYS]
    if unknown:
        raise CalibrationError(unknown_keys_message(where, unknown, KEYS))
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise CalibrationError(f"{prefix}{', '.join(missing)}: required")
    when = data["calibrated_at"]
    try:
        moment = datetime.fromisoformat(when) if isinstance(when, str) else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise CalibrationError(
            f"{prefix}calibrated_at: an ISO 8601 time with its zone, e.g. 2026-12-01T09:30:00Z"
        )
    if moment > (now or datetime.now(UTC)) + timedelta(minutes=5):
        raise CalibrationError(f"{prefix}calibrated_at: {when} is in the future")
    for key in ("width", "height"):
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_PIXELS:
            raise CalibrationError(f"{prefix}{key}: a whole number of pixels, 1..{MAX_PIXELS}")
    fx, fy = _number(data, "fx", prefix), _number(data, "fy", prefix)
    cx, cy = _number(data, "cx", prefix), _number(data, "cy", prefix)
    if fx <= 0 or fy <= 0:
        raise CalibrationError(f"{prefix}fx, fy: focal lengths in pixels, > 0")
    if not (0 <= cx <= data["width"] and 0 <= cy <= data["height"]):
        raise CalibrationError(f"{prefix}cx, cy: the principal point lies inside the image")
    model = data["distortion_model"]
    if model not in DISTORTION_COEFFICIENTS:
        raise CalibrationError(
            f"{prefix}distortion_model: {model!r} is not one of "
            f"{', '.join(DISTORTION_COEFFICIENTS)}"
        )
    coefficients = data["distortion_coefficients"]
    count = DISTORTION_COEFFICIENTS[model]
    if (
        not isinstance(coefficients, list)
        or len(coefficients) != count
        or not all(
            isinstance(c, int | float) and not isinstance(c, bool) and math.isfinite(c)
            for c in coefficients
        )
    ):
        raise CalibrationError(
            f"{prefix}distortion_coefficients: {count} finite numbers for {model}"
        )
    check_extrinsics(data["extrinsics"], prefix)
    frame = data.get("reference_frame", "robot_base")
    if not isinstance(frame, str) or not frame.strip() or len(frame) > FRAME_NAME_MAX:
        raise CalibrationError(f"{prefix}reference_frame: a frame name of 1-{FRAME_NAME_MAX} chars")
    if "camera" in data and (not isinstance(data["camera"], str) or not data["camera"].strip()):
        raise CalibrationError(f"{prefix}camera: the camera's name, e.g. wrist")
    body = {key: data[key] for key in REQUIRED}
    body["reference_frame"] = frame.strip()
    return body


def check_extrinsics(matrix, prefix: str = "") -> None:
    """A 4x4 homogeneous transform: last row 0 0 0 1, an orthonormal rotation (det +1)."""
    if (
        not isinstance(matrix, list)
        or len(matrix) != 4
        or not all(isinstance(row, list) and len(row) == 4 for row in matrix)
        or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for row in matrix
            for v in row
        )
    ):
        raise CalibrationError(f"{prefix}extrinsics: a 4x4 list of finite numbers")
    if [float(v) for v in matrix[3]] != [0.0, 0.0, 0.0, 1.0]:
        raise CalibrationError(f"{prefix}extrinsics: the last row must be 0 0 0 1")
    rotation = [row[:3] for row in matrix[:3]]
    for i in range(3):
        for j in range(3):
            dot = sum(rotation[k][i] * rotation[k][j] for k in range(3))
            if abs(dot - (1.0 if i == j else 0.0)) > ORTHONORMAL_TOLERANCE:
                raise CalibrationError(
                    f"{prefix}extrinsics: the rotation (upper left 3x3) is not orthonormal"
                )
    if _determinant(rotation) < 0:
        raise CalibrationError(f"{prefix}extrinsics: the rotation is a reflection (det -1)")


def _determinant(m) -> float:
    return (
        m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])
    )


def _normalized(v):
    length = math.sqrt(sum(c * c for c in v))
    return [c / length for c in v]


def _cross(a, b):
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


def look_at(position, target) -> list[list[float]]:
    """Camera -> base transform of a camera at `position` looking at `target` (OpenCV axes:
    z forward, x right, y down; the base's z is up)."""
    forward = _normalized([t - p for t, p in zip(target, position, strict=True)])
    right = _normalized(_cross(forward, [0.0, 0.0, 1.0]))
    down = _cross(forward, right)
    return [
        [right[0], down[0], forward[0], position[0]],
        [right[1], down[1], forward[1], position[1]],
        [right[2], down[2], forward[2], position[2]],
        [0.0, 0.0, 0.0, 1.0],
    ]


def simulated_calibration(
    camera: str,
    *,
    width: int,
    height: int,
    calibrated_at: datetime,
    seed: int = 0,
) -> dict:
    """A plausible calibration of `camera` at `width` x `height`: a 60-75 degree horizontal
    field of view, the principal point within a few pixels of the centre, small plumb-bob
    distortion; a wrist camera 8 cm behind the flange looking along it, any other camera
    0.8-1.2 m from the base looking down at the workspace."""
    rng = random.Random(f"{camera}:{width}x{height}:{seed}")
    fov = math.radians(rng.uniform(60.0, 75.0))
    fx = (width / 2) / math.tan(fov / 2)
    fy = fx * rng.uniform(0.998, 1.002)
    cx = (width - 1) / 2 + rng.uniform(-3, 3)
    cy = (height - 1) / 2 + rng.uniform(-3, 3)
    if camera in WRIST_CAMERAS:
        frame = "end_effector"
        extrinsics = [
            [1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 0.0, round(rng.uniform(-0.06, -0.04), 4)],
            [0.0, 0.0, 1.0, -0.08],
            [0.0, 0.0, 0.0, 1.0],
        ]
    else:
        frame = "robot_base"
        angle = rng.uniform(-0.6, 0.6)
        distance = rng.uniform(0.8, 1.2)
        position = [
            0.45 + distance * math.cos(angle),
            distance * math.sin(angle),
            rng.uniform(0.5, 0.8),
        ]
        extrinsics = look_at(position, [0.45, 0.0, 0.05])
    return {
        "calibrated_at": calibrated_at.astimezone(UTC).isoformat(),
        "width": width,
        "height": height,
        "fx": round(fx, 3),
        "fy": round(fy, 3),
        "cx": round(cx, 3),
        "cy": round(cy, 3),
        "distortion_model": "plumb_bob",
        "distortion_coefficients": [
            round(rng.uniform(-0.05, 0.12), 5),
            round(rng.uniform(-0.25, 0.05), 5),
            round(rng.uniform(-0.001, 0.001), 6),
            round(rng.uniform(-0.001, 0.001), 6),
            round(rng.uniform(-0.02, 0.05), 5),
        ],
        "extrinsics": [[round(v, 9) for v in row] for row in extrinsics],
        "reference_frame": frame,
    }


def parse_time(value) -> datetime | None:
    """An API timestamp (ISO 8601, 'Z' or an offset) as an aware datetime; None if absent."""
    if not value:
        return None
    moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def same_calibration(registered: dict, body: dict) -> bool:
    """Whether a calibration the platform lists is this body (so it is not sent twice)."""
    if parse_time(registered.get("calibrated_at")) != parse_time(body["calibrated_at"]):
        return False
    for key in ("width", "height", "distortion_model", "reference_frame"):
        if registered.get(key) != body.get(key):
            return False
    numbers = [registered.get(k) for k in ("fx", "fy", "cx", "cy")]
    wanted = [body[k] for k in ("fx", "fy", "cx", "cy")]
    numbers += list(registered.get("distortion_coefficients") or [])
    wanted += list(body["distortion_coefficients"])
    numbers += [v for row in registered.get("extrinsics") or [] for v in row]
    wanted += [v for row in body["extrinsics"] for v in row]
    return len(numbers) == len(wanted) and all(
        isinstance(a, int | float) and math.isclose(float(a), float(b), abs_tol=1e-9)
        for a, b in zip(numbers, wanted, strict=True)
    )
