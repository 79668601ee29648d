"""The collection plan on the fleet's side (issue 30): a site's objects and scenes, each robot
camera's calibration, and what each episode names.

On registration (`CollectionPlan.register`) the agent finds or creates, by name, every object
and scene its configuration lists per site (three objects and two scenes typical of the
site's kind when it lists none), and calibrates each camera of each robot (the embodiment's
standard views and the camera add-ons among its sensors, at their catalog resolution) whose
latest calibration is missing, older than `collection.recalibrate_days`, or older than a
scene of its site (a scene arranged since means the camera may have moved).

Each episode then names (`CollectionPlan.episode_fields`):

- its **scene**: the one the job was set up in, chosen when the job is first worked on: the
  site's scene at the job's environment index (modulo their number), or, if a job of
  another environment of the order at that site has it, the next one none has (an order
  counting scenes binds each environment to a scene of its own; a later job for the same
  environment, a shortfall's, so finds the same scene);
- the **object** it handled (`objects_handled`, one name): the job cycles through K of the
  site's objects, K = the job's `plan.objects_per_environment` (the fleet job API), else
  all of them; the K start at offset environment_index x K (x 1 when K is not shown), so
  two environments at one site use different objects when the site has enough. An object
  QA refuses for this job (`object_not_in_plan`, `cell_full`) is dropped from its cycle;
- its **calibrations**: {camera name: the robot's calibration in force} for the job's cameras.

Deliberate mistakes (`collection.plan_defects`, or `FleetAgent(plan_defects=...)`), each sent
once, for QA to reject: `object_not_in_plan` (an object no site of the fleet registered),
`uncalibrated_camera` (the robot's first camera is left uncalibrated at registration, an
episode is sent without it, then it is calibrated), `stale_calibration` (a calibration dated
a year back and before the scene was arranged is registered and named for one camera).

A platform without these endpoints (`GET fleet/objects` answers 404) is served as before:
the agent logs it once and sends episodes without scene or calibrations.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from fleet_agent.calibration import parse_time, simulated_calibration
from fleet_agent.client import ApiClient, ApiError
from fleet_agent.config import PLAN_DEFECTS, AgentConfig, SiteConfig

log = logging.getLogger("fleet_agent")

UNREGISTERED_OBJECT = "unregistered-object"  # the object_not_in_plan defect's
DEFAULT_RESOLUTION = (640, 480)
STALE_BY = timedelta(days=365)  # older than any CALIBRATION_MAX_AGE_DAYS
SCENE_ARRANGED_BEFORE_START = timedelta(days=1)
CALIBRATED_BEFORE_NOW = timedelta(minutes=5)  # so a clock a little ahead still has it in force
REFUSED_OBJECT = ("object_not_in_plan", "cell_full")


def camera_name(camera: dict) -> str:
    return camera.get("name") or str(camera.get("key", "")).removeprefix("observation.images.")


def robot_cameras(robot: dict, embodiments: dict, sensors: dict) -> list[tuple[str, int, int]]:
    """(name, width, height) of each camera the robot carries: its embodiment's standard
    views, then the camera add-ons among its sensors, at their catalog resolution (640x480
    when the catalog gives none)."""
    entries = list((embodiments.get(robot["embodiment"]) or {}).get("cameras") or [])
    for slug in sorted(robot.get("sensors") or []):
        stream = (sensors.get(slug) or {}).get("stream") or {}
        if stream.get("kind") == "camera":
            entries.append(stream)
    cameras, seen = [], set()
    for entry in entries:
        name = entry.get("name")
        if not name or name in seen:
            continue
        seen.add(name)
        width = int(entry.get("min_width") or 0) or DEFAULT_RESOLUTION[0]
        height = int(entry.get("min_height") or 0) or DEFAULT_RESOLUTION[1]
        cameras.append((name, width, height))
    return cameras


def objects_cycle(objects: list[str], environment_index: int, per_environment: int | None):
    """The objects a job at environment `environment_index` cycles through: K of the site's
    (K = per_environment, else all, K = 1 for the offset), starting at environment_index x K."""
    if not objects:
        return []
    count = len(objects) if not per_environment else min(per_environment, len(objects))
    start = (environment_index * (per_environment or 1)) % len(objects)
    return [objects[(start + i) % len(objects)] for i in range(count)]


def choose_scene(scenes: list[str], environment_index: int, taken: set[str]) -> str | None:
    """The scene at the environment's index, or the next one no other job of the order has."""
    if not scenes:
        return None
    preferred = environment_index % len(scenes)
    for step in range(len(scenes)):
        scene = scenes[(preferred + step) % len(scenes)]
        if scene not in taken:
            return scene
    return scenes[preferred]


def needs_calibration(
    latest: dict | None, *, now: datetime, max_age: timedelta, arranged: list[datetime]
) -> bool:
    """Missing, older than `max_age`, or made before a scene of the site was arranged."""
    if latest is None:
        return True
    when = parse_time(latest.get("calibrated_at"))
    return when is None or now - when > max_age or any(when < moment for moment in arranged)


@dataclass
class JobPlan:
    """What the agent decided for one job: its scene and its objects' cycle."""

    scene: str | None
    cycle: list[str]
    sent: int = 0
    refused: set = field(default_factory=set)

    def next_object(self) -> str | None:
        usable = [o for o in self.cycle if o not in self.refused] or self.cycle
        if not usable:
            return None
        chosen = usable[self.sent % len(usable)]
        self.sent += 1
        return chosen


class CollectionPlan:
    """The agent's objects, scenes and calibrations (see the module docstring)."""

    def __init__(self, config: AgentConfig, client: ApiClient, plan_defects=None):
        self.config = config
        self.client = client
        wanted = config.collection.plan_defects if plan_defects is None else plan_defects
        unknown = [d for d in wanted if d not in PLAN_DEFECTS]
        if unknown:
            raise ValueError(f"Unknown plan defect {unknown[0]!r}; one of {PLAN_DEFECTS}.")
        self.pending = list(dict.fromkeys(wanted))
        self.available = True  # False: the platform has no collection plan endpoints
        self.scenes: dict[str, list[dict]] = {}  # site id -> its configured scenes
        self.objects: dict[str, list[str]] = {}  # site id -> object names, configured order
        self.calibrations: dict[tuple[str, str], dict] = {}  # (robot, camera) -> in force
        self.held: dict[tuple[str, str], dict] = {}  # uncalibrated_camera: not sent yet
        self.jobs: dict[str, JobPlan] = {}
        self.registered: Counter = Counter()  # objects, scenes, calibrations created
        self._stale: dict[tuple[str, str], str] = {}
        self._placed: dict[str, tuple] = {}  # job id -> ((order, site), environment index)

    # --- registration -------------------------------------------------------------------

    def register(self, sites: dict[str, dict], configs: dict[str, SiteConfig], robots: list):
        for site_id, site_config in configs.items():
            self.objects[site_id] = list(site_config.objects)
        try:
            existing_objects = self.client.site_objects()
        except ApiError as exc:
            if exc.status != 404:
                raise
            self.available = False
            log.warning("this platform has no objects, scenes or calibrations API (404)")
            return
        existing_scenes = self.client.scenes()
        now = datetime.now(UTC)
        for site_id, site_config in configs.items():
            self._ensure_objects(site_id, site_config, existing_objects)
            self._ensure_scenes(site_id, site_config, existing_scenes, now)
        embodiments = self.client.embodiments()
        sensors = self.client.sensors()
        for robot in robots:
            arranged = [parse_time(s["arranged_at"]) for s in self.scenes.get(robot["site"], [])]
            self._ensure_calibrations(robot, embodiments, sensors, now, [a for a in arranged if a])

    def _ensure_objects(self, site_id: str, site_config: SiteConfig, existing: list) -> None:
        found = {o["name"]: o for o in existing if o["site"] == site_id}
        for spec in site_config.object_specs:
            details = {
                "category": spec.category,
                "size_class": spec.size_class,
                "photo_url": spec.photo_url,
                "notes": spec.notes,
            }
            current = found.get(spec.name)
            if current is None:
                self.client.create_site_object({"site": site_id, "name": spec.name, **details})
                self.registered["objects"] += 1
                continue
            changes = {k: v for k, v in details.items() if (current.get(k) or "") != v}
            if not current.get("active", True):
                changes["active"] = True
            if changes:
                self.client.update_site_object(current["id"], changes)

    def _ensure_scenes(self, site_id: str, site_config: SiteConfig, existing, now) -> None:
        found = {s["name"]: s for s in existing if s["site"] == site_id}
        scenes = []
        for spec in site_config.scenes:
            scene = found.get(spec.name)
            if scene is None:
                arranged = spec.arranged_at or now - SCENE_ARRANGED_BEFORE_START
                scene = self.client.create_scene(
                    {
                        "site": site_id,
                        "name": spec.name,
                        "table": spec.table,
                        "background": spec.background,
                        "lighting": spec.lighting,
                        "camera_placement": spec.camera_placement,
                        "notes": spec.notes,
                        "arranged_at": arranged.isoformat(),
                    }
                )
                self.registered["scenes"] += 1
            elif not scene.get("active", True):
                scene = self.client.update_scene(scene["id"], {"active": True})
            scenes.append(scene)
        self.scenes[site_id] = scenes

    def _ensure_calibrations(self, robot, embodiments, sensors, now, arranged) -> None:
        max_age = timedelta(days=self.config.collection.recalibrate_days)
        cameras = robot_cameras(robot, embodiments, sensors)
        for number, (camera, width, height) in enumerate(cameras):
            listed = self.client.calibrations(robot=robot["id"], camera=camera)
            in_force = [c for c in listed if (parse_time(c["calibrated_at"]) or now) <= now]
            latest = max(in_force, key=lambda c: parse_time(c["calibrated_at"]), default=None)
            key = (robot["id"], camera)
            if not needs_calibration(latest, now=now, max_age=max_age, arranged=arranged):
                self.calibrations[key] = latest
                continue
            body = {
                "robot": robot["id"],
                "camera": camera,
                **simulated_calibration(
                    camera,
                    width=width,
                    height=height,
                    calibrated_at=now - CALIBRATED_BEFORE_NOW,
                    seed=hash_text(robot["id"]),
                ),
            }
            if number == 0 and "uncalibrated_camera" in self.pending and latest is None:
                self.held[key] = body  # sent once the episode without it has gone
                continue
            self.calibrations[key] = self._create(body)

    def _create(self, body: dict) -> dict:
        created = self.client.create_calibration(body)
        self.registered["calibrations"] += 1
        log.info(
            "calibrated camera %s of robot %s: %s", body["camera"], body["robot"], created["id"]
        )
        return created

    def release(self, robot_id: str | None = None) -> None:
        """Calibrate the held cameras (of one robot, or all)."""
        for key in [k for k in self.held if robot_id is None or k[0] == robot_id]:
            self.calibrations[key] = self._create(self.held.pop(key))

    # --- per episode ----------------------------------------------------------------------

    def job_plan(self, job: dict) -> JobPlan:
        plan = self.jobs.get(job["id"])
        if plan is None:
            index = int(job.get("environment_index") or 0)
            names = [s["name"] for s in self.scenes.get(job["site"], [])]
            place = (job.get("order"), job["site"])
            others = [
                (self._placed[other_id][1], p)
                for other_id, p in self.jobs.items()
                if self._placed[other_id][0] == place
            ]
            # a scene no other environment of the order has at this site (so a job for an
            # environment already worked on, a shortfall's, finds its scene again)
            taken = {p.scene for env, p in others if env != index}
            cycle = objects_cycle(
                self.objects.get(job["site"], []),
                index,
                (job.get("plan") or {}).get("objects_per_environment"),
            )
            plan = JobPlan(scene=choose_scene(names, index, taken), cycle=cycle)
            self.jobs[job["id"]] = plan
            self._placed[job["id"]] = (place, index)
        return plan

    def next_defect(self, job: dict, robot: dict) -> str | None:
        """The plan defect this episode carries (each once), or None."""
        cameras = [camera_name(c) for c in (job.get("stream_spec") or {}).get("cameras") or []]
        held = [c for c in cameras if (robot["id"], c) in self.held]
        if "uncalibrated_camera" in self.pending and held:
            return "uncalibrated_camera"
        for defect in self.pending:
            if defect == "object_not_in_plan":
                return defect
            if defect == "stale_calibration" and self.available and cameras:
                return defect
        return None

    def episode_fields(self, job: dict, robot: dict, defect: str | None) -> tuple[dict, str]:
        """The registration's plan fields (objects_handled, scene, camera_calibrations) and
        the object the episode counts for. Calibrates a held camera first unless `defect` is
        uncalibrated_camera (then the episode goes without it)."""
        plan = self.job_plan(job)
        if defect != "uncalibrated_camera":
            self.release(robot["id"])
        handled = UNREGISTERED_OBJECT if defect == "object_not_in_plan" else plan.next_object()
        fields = {"objects_handled": [handled] if handled else []}
        if not self.available:
            return fields, handled
        if plan.scene:
            fields["scene"] = plan.scene
        calibrations = {}
        cameras = [camera_name(c) for c in (job.get("stream_spec") or {}).get("cameras") or []]
        for camera in cameras:
            in_force = self.calibrations.get((robot["id"], camera))
            if in_force is not None:
                calibrations[camera] = in_force["id"]
        if defect == "stale_calibration" and cameras:
            calibrations[cameras[0]] = self._stale_calibration(job, robot, cameras[0])
        if calibrations:
            fields["camera_calibrations"] = calibrations
        return fields, handled

    def _stale_calibration(self, job: dict, robot: dict, camera: str) -> str:
        key = (robot["id"], camera)
        if key not in self._stale:
            now = datetime.now(UTC)
            scene = next(
                (
                    s
                    for s in self.scenes.get(job["site"], [])
                    if s["name"] == self.jobs[job["id"]].scene
                ),
                None,
            )
            arranged = parse_time(scene["arranged_at"]) if scene else now
            when = min(arranged - timedelta(days=1), now - STALE_BY)
            in_force = self.calibrations.get(key) or self.held.get(key) or {}
            width, height = in_force.get("width") or 640, in_force.get("height") or 480
            body = {
                "robot": robot["id"],
                "camera": camera,
                **simulated_calibration(camera, width=width, height=height, calibrated_at=when),
            }
            self._stale[key] = self._create(body)["id"]
        return self._stale[key]

    def sent(self, defect: str | None) -> None:
        """An episode carrying `defect` went up: it is not sent again."""
        if defect in self.pending:
            self.pending.remove(defect)
        if defect == "uncalibrated_camera":
            self.release()

    def refused(self, job_id: str, handled: str | None, codes: list[str]) -> None:
        """QA refused a clean episode's object for this job: drop it from the job's cycle."""
        plan = self.jobs.get(job_id)
        if plan is not None and handled and any(code in REFUSED_OBJECT for code in codes):
            plan.refused.add(handled)
            log.info("job %s: object %s left out from now on (%s)", job_id, handled, codes)


def hash_text(text: str) -> int:
    """A stable small number from a text (Python's hash() changes per process)."""
    return sum((i + 1) * ord(c) for i, c in enumerate(text)) % 1_000_003
