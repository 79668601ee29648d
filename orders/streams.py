"""An order's stream spec (issue 15): what every episode of the order carries, frozen into
`Order.stream_spec` when the order is placed.

    {"version": 1,
     "state": {"key": "observation.state", "names": [...]},
     "action": {"key": "action", "names": [...]},
     "cameras": [{"key": "observation.images.scene", "name": "scene",
                  "min_width": 320, "min_height": 240, "source": "embodiment"}, ...],
     "vectors": [{"key": "observation.force_torque", "names": ["fx", ...],
                  "source": "force-torque"}, ...],
     "video_codec": "av1"}

Cameras are the embodiment's standard views, then the ordered camera add-ons (fps: the
episode's); vectors are frame-aligned float columns of the episode's parquet. An order placed
before stream specs existed keeps `{}`: state and action only, no cameras (the readers below
answer for both).
"""

from orders import catalog
from orders.models import Embodiment, Order, SensorAddon

SPEC_VERSION = 1
CAMERA_KEY_PREFIX = "observation.images."
VIDEO_CODECS = ("av1", "h264")  # what a delivery may be encoded in; AV1 is LeRobot's default
DEFAULT_VIDEO_CODEC = "av1"


def _camera(entry: dict, source: str) -> dict:
    return {
        "key": CAMERA_KEY_PREFIX + entry["name"],
        "name": entry["name"],
        "min_width": int(entry.get("min_width", 0)),
        "min_height": int(entry.get("min_height", 0)),
        "source": source,
    }


def _names(names: list, dim: int, prefix: str) -> list[str]:
    """The catalog's names when they fit the vector, else generic ones (never a wrong length)."""
    if len(names) == dim:
        return [str(name) for name in names]
    return [f"{prefix}_{index}" for index in range(dim)]


def build_stream_spec(
    *,
    embodiment: Embodiment,
    sensor_slugs,
    video_codec: str = DEFAULT_VIDEO_CODEC,
    known: catalog.Catalog | None = None,
) -> dict:
    """The spec of an order for `embodiment` with the sensor add-ons `sensor_slugs`; `known`:
    the cached catalog's copy the caller already read (None: it is read here)."""
    cameras = [_camera(entry, "embodiment") for entry in embodiment.cameras or []]
    vectors = []
    # the active add-ons from the catalog's copy; any other (retired since a quote) from the rows
    held = (known or catalog.current()).sensors
    sensors = {slug: held[slug] for slug in sensor_slugs if slug in held}
    missing = [slug for slug in sensor_slugs if slug not in held]
    if missing:
        sensors.update({s.slug: s for s in SensorAddon.objects.filter(slug__in=missing)})
    for slug in sorted(sensors):
        stream = sensors[slug].stream or {}
        if stream.get("kind") == "camera":
            cameras.append(_camera(stream, slug))
        elif stream.get("kind") == "vector":
            vectors.append({"key": stream["key"], "names": list(stream["names"]), "source": slug})
    dim = embodiment.action_dim
    return {
        "version": SPEC_VERSION,
        "state": {
            "key": "observation.state",
            "names": _names(embodiment.state_names or [], dim, "state"),
        },
        "action": {"key": "action", "names": _names(embodiment.action_names or [], dim, "action")},
        "cameras": cameras,
        "vectors": vectors,
        "video_codec": video_codec,
    }


def freeze_stream_spec(order: Order, *, video_codec: str = DEFAULT_VIDEO_CODEC) -> dict:
    """Build the order's spec and store it (the caller saves, or passes it to create)."""
    order.stream_spec = build_stream_spec(
        embodiment=order.embodiment, sensor_slugs=order.sensor_slugs, video_codec=video_codec
    )
    return order.stream_spec


# --- Readers: every consumer reads a spec through these ({} = state/action only) ------------


def cameras_of(spec: dict) -> list[dict]:
    return list((spec or {}).get("cameras") or [])


def camera_keys(spec: dict) -> list[str]:
    return [camera["key"] for camera in cameras_of(spec)]


def camera_names(spec: dict) -> list[str]:
    """The cameras' names (`wrist` for `observation.images.wrist`): what calibrations name."""
    return [
        camera.get("name") or str(camera["key"]).removeprefix(CAMERA_KEY_PREFIX)
        for camera in cameras_of(spec)
    ]


def vectors_of(spec: dict) -> list[dict]:
    return list((spec or {}).get("vectors") or [])


def video_codec_of(spec: dict) -> str:
    return (spec or {}).get("video_codec") or DEFAULT_VIDEO_CODEC


def names_of(spec: dict, part: str) -> list[str] | None:
    """The element names of "state" or "action"; None for a spec without them."""
    entry = (spec or {}).get(part) or {}
    return list(entry["names"]) if entry.get("names") else None
