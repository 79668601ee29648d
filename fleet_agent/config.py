"""The agent's configuration: one TOML file (stdlib tomllib).

    base_url = "http://127.0.0.1:8000"
    api_key = "mk_..."                 # or api_key_env = "FLEET_API_KEY"

    [fleet]
    name = "Acme Robotics"             # the fleet is found by this name, or created
    weekly_capacity_hours = 40
    payout_rate_per_hour = 60
    currency = "USD"                   # optional
    timezone = "UTC"                   # optional
    webhook_url = ""                   # optional

    [[sites]]
    name = "Bench A"                   # found by name within the fleet, or created
    kind = "lab_bench"                 # kitchen, household, office, warehouse_shelf, ...
    objects = ["peg-8mm", {name = "block", category = "block", size_class = "small"}]
                                       # default: three typical of the kind

    [[sites.scenes]]                   # optional: default two scenes, arrangement-1 and -2
    name = "window-bench"              # found by name within the site, or created
    lighting = "daylight"              # also table, background, camera_placement, notes
    arranged_at = 2026-12-01T09:00:00Z # optional: when it was set up (default: a day ago)

    [[sites.robots]]
    name = "fr3-01"                    # found by name within the site, or created
    embodiment = "franka-fr3"
    end_effector = "parallel_gripper"
    sensors = ["wrist-camera"]

    [collection]                       # optional, all keys optional
    fps = 30
    episode_seconds = [10, 30]         # min and max length of an episode
    operators = ["op-1", "op-2"]
    defect_rate = 0.0
    success_rate = 0.9
    poll_seconds = 2
    heartbeat_seconds = 60
    seed = 0                           # omit for a different run every time
    recalibrate_days = 7               # calibrate a camera again when its latest is older
    plan_defects = []                  # object_not_in_plan, uncalibrated_camera,
                                       # stale_calibration: each sent once (QA rejects them)

    [webhook]                          # optional: receive offers instead of only polling
    listen = "0.0.0.0:8765"            # the receiver's address
    url = "https://fleet.example.com/webhooks/marketplace"  # how the platform reaches it

`load_config(path)` raises `ConfigError` naming the offending key on anything invalid.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path

SITE_KINDS = (
    "kitchen",
    "household",
    "office",
    "warehouse_shelf",
    "retail_aisle",
    "lab_bench",
    "production_line",
)
END_EFFECTORS = ("parallel_gripper", "suction", "dexterous_hand", "tool_changer")
OPERATOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")


class ConfigError(ValueError):
    """The configuration file is missing, unreadable or invalid; the message says where."""


@dataclass(frozen=True)
class RobotConfig:
    name: str
    embodiment: str
    end_effector: str = "parallel_gripper"
    sensors: tuple[str, ...] = ()


@dataclass(frozen=True)
class ObjectConfig:
    """An object the site can use (issue 30): its name is its identity on the platform."""

    name: str
    category: str = ""
    size_class: str = ""  # small | medium | large | "" (not said)
    photo_url: str = ""
    notes: str = ""


@dataclass(frozen=True)
class SceneConfig:
    """One arrangement of the site (table, background, lighting, camera placement); a moved
    robot or camera is a new scene. `arranged_at` None: the agent's start, less a day."""

    name: str
    table: str = ""
    background: str = ""
    lighting: str = ""
    camera_placement: str = ""
    notes: str = ""
    arranged_at: datetime | None = None


@dataclass(frozen=True)
class SiteConfig:
    name: str
    kind: str
    objects: tuple[str, ...] = ()  # the names of `object_specs`
    description: str = ""
    robots: tuple[RobotConfig, ...] = ()
    object_specs: tuple[ObjectConfig, ...] = ()
    scenes: tuple[SceneConfig, ...] = ()


@dataclass(frozen=True)
class FleetConfig:
    name: str
    weekly_capacity_hours: Decimal
    payout_rate_per_hour: Decimal
    currency: str = "USD"
    timezone: str = "UTC"
    webhook_url: str = ""


@dataclass(frozen=True)
class CollectionConfig:
    fps: int = 30
    min_episode_seconds: float = 10.0
    max_episode_seconds: float = 30.0
    operators: tuple[str, ...] = ("op-1", "op-2", "op-3")
    defect_rate: float = 0.0
    success_rate: float = 0.9
    poll_seconds: float = 2.0
    heartbeat_seconds: float = 60.0
    seed: int | None = None
    # The collection plan's deliberate mistakes, each sent once (fleet_agent/agent.py).
    plan_defects: tuple[str, ...] = ()
    # A camera whose latest calibration is older than this is calibrated again on start.
    recalibrate_days: float = 7.0


@dataclass(frozen=True)
class WebhookConfig:
    """Run a receiver on host:port; `url` is where the platform reaches it (default: local)."""

    host: str = "127.0.0.1"
    port: int = 0  # 0: any free port (then url must be empty: it is derived)
    url: str = ""


@dataclass(frozen=True)
class AgentConfig:
    base_url: str
    api_key: str
    fleet: FleetConfig
    sites: tuple[SiteConfig, ...]
    collection: CollectionConfig = field(default_factory=CollectionConfig)
    webhook: WebhookConfig | None = None


def load_config(path: str | os.PathLike, environ: dict | None = None) -> AgentConfig:
    """Read and validate a TOML configuration file."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    try:
        return parse_config(raw, environ=environ)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse_config(raw: dict, environ: dict | None = None) -> AgentConfig:
    """Validate an already parsed TOML document (a dict)."""
    environ = os.environ if environ is None else environ
    _only(
        raw, "", {"base_url", "api_key", "api_key_env", "fleet", "sites", "collection", "webhook"}
    )
    base_url = _string(raw, "base_url", "")
    if not re.match(r"^https?://[^/\s]+", base_url):
        raise ConfigError("base_url: an http(s) URL such as http://127.0.0.1:8000")
    api_key = raw.get("api_key")
    if api_key is None and "api_key_env" in raw:
        variable = _string(raw, "api_key_env", "")
        api_key = environ.get(variable)
        if not api_key:
            raise ConfigError(f"api_key_env: the environment variable {variable} is not set")
    if not isinstance(api_key, str) or not api_key.strip():
        raise ConfigError("api_key: required (or api_key_env naming an environment variable)")

    fleet = _fleet(_table(raw, "fleet", ""))
    sites_raw = raw.get("sites")
    if not isinstance(sites_raw, list) or not sites_raw:
        raise ConfigError("sites: at least one [[sites]] table is required")
    sites = tuple(_site(site, f"sites[{i}]") for i, site in enumerate(sites_raw))
    names = [s.name for s in sites]
    if len(set(names)) != len(names):
        raise ConfigError("sites: site names must be unique (they identify sites)")
    collection = _collection(raw.get("collection", {}))
    webhook = _webhook(raw["webhook"]) if "webhook" in raw else None
    if webhook and fleet.webhook_url:
        raise ConfigError("fleet.webhook_url: leave it out when [webhook] runs the receiver")
    return AgentConfig(
        base_url=base_url.rstrip("/"),
        api_key=api_key.strip(),
        fleet=fleet,
        sites=sites,
        collection=collection,
        webhook=webhook,
    )


def _webhook(raw) -> WebhookConfig:
    where = "webhook"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a table")
    _only(raw, where, {"listen", "url"})
    listen = _string(raw, "listen", where, "127.0.0.1:0")
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{where}.listen: host:port, e.g. 127.0.0.1:8765 (port 0: any)")
    url = _string(raw, "url", where, "", allow_empty=True)
    if url and not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(f"{where}.url: the http(s) URL the platform posts to")
    return WebhookConfig(host=host, port=int(port), url=url)


def _fleet(raw: dict) -> FleetConfig:
    where = "fleet"
    _only(raw, where, set(FleetConfig.__dataclass_fields__))
    currency = _string(raw, "currency", where, "USD")
    if not re.match(r"^[A-Z]{3}$", currency):
        raise ConfigError(f"{where}.currency: a 3-letter ISO code such as USD")
    return FleetConfig(
        name=_string(raw, "name", where),
        weekly_capacity_hours=_decimal(raw, "weekly_capacity_hours", where),
        payout_rate_per_hour=_decimal(raw, "payout_rate_per_hour", where),
        currency=currency,
        timezone=_string(raw, "timezone", where, "UTC"),
        webhook_url=_string(raw, "webhook_url", where, "", allow_empty=True),
    )


def _site(raw, where: str) -> SiteConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a table")
    _only(raw, where, {"name", "kind", "objects", "description", "robots", "scenes"})
    kind = _string(raw, "kind", where)
    if kind not in SITE_KINDS:
        raise ConfigError(f"{where}.kind: {kind!r} is not one of {', '.join(SITE_KINDS)}")
    robots_raw = raw.get("robots", [])
    if not isinstance(robots_raw, list):
        raise ConfigError(f"{where}.robots: a list of [[sites.robots]] tables")
    robots = tuple(_robot(r, f"{where}.robots[{i}]") for i, r in enumerate(robots_raw))
    names = [r.name for r in robots]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.robots: robot names must be unique within a site")
    objects = _objects(raw, where, kind)
    return SiteConfig(
        name=_string(raw, "name", where),
        kind=kind,
        objects=tuple(o.name for o in objects),
        description=_string(raw, "description", where, "", allow_empty=True),
        robots=robots,
        object_specs=objects,
        scenes=_scenes(raw, where, kind),
    )


# A site that lists none gets three objects and two scenes typical of its kind.
DEFAULT_OBJECTS = {
    "kitchen": (
        ("mug", "mug", "small"),
        ("plate", "dish", "medium"),
        ("sponge", "sponge", "small"),
    ),
    "household": (
        ("towel", "textile", "medium"),
        ("remote", "remote", "small"),
        ("book", "book", "small"),
    ),
    "office": (
        ("stapler", "tool", "small"),
        ("pen", "pen", "small"),
        ("notebook", "book", "small"),
    ),
    "warehouse_shelf": (
        ("tote", "container", "large"),
        ("box", "box", "medium"),
        ("bottle", "bottle", "small"),
    ),
    "retail_aisle": (
        ("cereal-box", "box", "medium"),
        ("can", "can", "small"),
        ("bottle", "bottle", "small"),
    ),
    "lab_bench": (
        ("peg", "peg", "small"),
        ("block", "block", "small"),
        ("connector", "connector", "small"),
    ),
    "production_line": (
        ("bracket", "part", "small"),
        ("bolt", "fastener", "small"),
        ("housing", "part", "medium"),
    ),
}
DEFAULT_SCENES = (
    ("arrangement-1", "the site's work table", "plain wall", "overhead LED", "front-left"),
    ("arrangement-2", "the site's work table", "shelving", "daylight", "front-right"),
)
SIZE_CLASSES = ("small", "medium", "large")
PLAN_DEFECTS = ("object_not_in_plan", "uncalibrated_camera", "stale_calibration")


def _objects(raw: dict, where: str, kind: str) -> tuple[ObjectConfig, ...]:
    """`objects`: names, or tables {name, category, size_class, photo_url, notes}."""
    if "objects" not in raw:
        return tuple(ObjectConfig(n, c, size) for n, c, size in DEFAULT_OBJECTS[kind])
    value = raw["objects"]
    if not isinstance(value, list):
        raise ConfigError(f"{where}.objects: a list of names or {{name = ..., category = ...}}")
    objects = []
    for i, item in enumerate(value):
        at = f"{where}.objects[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict):
            raise ConfigError(f"{at}: a name or a table {{name, category, size_class, ...}}")
        _only(item, at, set(ObjectConfig.__dataclass_fields__))
        size = _string(item, "size_class", at, "", allow_empty=True)
        if size and size not in SIZE_CLASSES:
            raise ConfigError(f"{at}.size_class: {size!r} is not one of {', '.join(SIZE_CLASSES)}")
        objects.append(
            ObjectConfig(
                name=_string(item, "name", at),
                category=_string(item, "category", at, "", allow_empty=True).lower(),
                size_class=size,
                photo_url=_string(item, "photo_url", at, "", allow_empty=True),
                notes=_string(item, "notes", at, "", allow_empty=True),
            )
        )
    names = [o.name for o in objects]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.objects: object names must be unique within a site")
    return tuple(objects)


def _scenes(raw: dict, where: str, kind: str) -> tuple[SceneConfig, ...]:
    """`[[sites.scenes]]`: name, table, background, lighting, camera_placement, notes,
    arranged_at (a TOML date-time with its offset)."""
    if "scenes" not in raw:
        return tuple(SceneConfig(n, t, b, light, c) for n, t, b, light, c in DEFAULT_SCENES)
    value = raw["scenes"]
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where}.scenes: one or more [[sites.scenes]] tables")
    scenes = []
    for i, item in enumerate(value):
        at = f"{where}.scenes[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{at}: a table")
        _only(item, at, set(SceneConfig.__dataclass_fields__))
        arranged = item.get("arranged_at")
        if arranged is not None and (not isinstance(arranged, datetime) or not arranged.tzinfo):
            raise ConfigError(
                f"{at}.arranged_at: a date-time with its offset, 2026-12-01T09:00:00Z"
            )
        texts = {
            key: _string(item, key, at, "", allow_empty=True)
            for key in ("table", "background", "lighting", "camera_placement", "notes")
        }
        scenes.append(SceneConfig(name=_string(item, "name", at), arranged_at=arranged, **texts))
    names = [s.name for s in scenes]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.scenes: scene names must be unique within a site")
    return tuple(scenes)


def _robot(raw, where: str) -> RobotConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a table")
    _only(raw, where, {"name", "embodiment", "end_effector", "sensors"})
    embodiment = _string(raw, "embodiment", where)
    if not SLUG.match(embodiment):
        raise ConfigError(f"{where}.embodiment: a catalog slug such as franka-fr3")
    end_effector = _string(raw, "end_effector", where, "parallel_gripper")
    if end_effector not in END_EFFECTORS:
        raise ConfigError(
            f"{where}.end_effector: {end_effector!r} is not one of {', '.join(END_EFFECTORS)}"
        )
    sensors = _strings(raw, "sensors", where)
    for sensor in sensors:
        if not SLUG.match(sensor):
            raise ConfigError(f"{where}.sensors: {sensor!r} is not a catalog slug")
    return RobotConfig(
        name=_string(raw, "name", where),
        embodiment=embodiment,
        end_effector=end_effector,
        sensors=sensors,
    )


def _collection(raw) -> CollectionConfig:
    where = "collection"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a table")
    _only(
        raw,
        where,
        {
            "fps",
            "episode_seconds",
            "operators",
            "defect_rate",
            "success_rate",
            "poll_seconds",
            "heartbeat_seconds",
            "seed",
            "plan_defects",
            "recalibrate_days",
        },
    )
    defaults = CollectionConfig()
    fps = raw.get("fps", defaults.fps)
    if not isinstance(fps, int) or isinstance(fps, bool) or not 1 <= fps <= 1000:
        raise ConfigError(f"{where}.fps: an integer between 1 and 1000")
    span = raw.get("episode_seconds", [defaults.min_episode_seconds, defaults.max_episode_seconds])
    if isinstance(span, int | float) and not isinstance(span, bool):
        span = [span, span]
    if (
        not isinstance(span, list)
        or len(span) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in span)
        or not 1 <= span[0] <= span[1] <= 3600
    ):
        raise ConfigError(f"{where}.episode_seconds: [min, max] with 1 <= min <= max <= 3600")
    operators = _strings(raw, "operators", where) or defaults.operators
    for operator in operators:
        if not OPERATOR.match(operator):
            raise ConfigError(
                f"{where}.operators: {operator!r} is not a pseudonym "
                "(1-64 letters, digits, '.', '_' or '-')"
            )
    seed = raw.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise ConfigError(f"{where}.seed: an integer")
    plan_defects = _strings(raw, "plan_defects", where)
    for defect in plan_defects:
        if defect not in PLAN_DEFECTS:
            raise ConfigError(
                f"{where}.plan_defects: {defect!r} is not one of {', '.join(PLAN_DEFECTS)}"
            )
    return CollectionConfig(
        plan_defects=tuple(dict.fromkeys(plan_defects)),
        recalibrate_days=_positive(raw, "recalibrate_days", where, defaults.recalibrate_days),
        fps=fps,
        min_episode_seconds=float(span[0]),
        max_episode_seconds=float(span[1]),
        operators=operators,
        defect_rate=_fraction(raw, "defect_rate", where, defaults.defect_rate),
        success_rate=_fraction(raw, "success_rate", where, defaults.success_rate),
        poll_seconds=_positive(raw, "poll_seconds", where, defaults.poll_seconds),
        heartbeat_seconds=_positive(raw, "heartbeat_seconds", where, defaults.heartbeat_seconds),
        seed=seed,
    )


# --- small validators ---------------------------------------------------------------------


def _key(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _only(raw: dict, where: str, allowed: set) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(
            f"{where or 'top level'}: unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )


def _table(raw: dict, name: str, where: str) -> dict:
    value = raw.get(name)
    if not isinstance(value, dict):
        raise ConfigError(f"{_key(where, name)}: a [{_key(where, name)}] table is required")
    return value


_MISSING = object()


def _string(raw: dict, name: str, where: str, default=_MISSING, allow_empty=False) -> str:
    value = raw.get(name, default)
    if value is _MISSING:
        raise ConfigError(f"{_key(where, name)}: required")
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ConfigError(f"{_key(where, name)}: a non-empty string")
    return value.strip()


def _strings(raw: dict, name: str, where: str) -> tuple[str, ...]:
    value = raw.get(name, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigError(f"{_key(where, name)}: a list of non-empty strings")
    return tuple(v.strip() for v in value)


def _decimal(raw: dict, name: str, where: str) -> Decimal:
    if name not in raw:
        raise ConfigError(f"{_key(where, name)}: required")
    value = raw[name]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{_key(where, name)}: a number")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise ConfigError(f"{_key(where, name)}: a number") from None
    if not number.is_finite() or number < 0:
        raise ConfigError(f"{_key(where, name)}: a number >= 0")
    return number


def _fraction(raw: dict, name: str, where: str, default: float) -> float:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ConfigError(f"{_key(where, name)}: a number between 0 and 1")
    return float(value)


def _positive(raw: dict, name: str, where: str, default: float) -> float:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{_key(where, name)}: a number of seconds > 0")
    return float(value)
