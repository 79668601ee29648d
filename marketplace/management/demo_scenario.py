"""The demo scenario `make demo` / `run_platform --demo` plays on a running platform.

Three simulated fleets (the reference `fleet-agent`, one process each, with different sites)
take the work of one order placed by the demo customer through the public API; staff mark
it paid (or the payment emulator does, when Stripe is configured elsewhere). When the order
is delivered, a signed download link is printed; in once-mode every file of the delivery is
downloaded through the audited links and checked against manifest.json.
"""

import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from django.conf import settings

from marketplace import services as accounts
from marketplace.models import ApiKey, Membership, Organization
from marketplace.tenancy import Caller

# Peg insertion is assembly work: dispatch wants a lab bench or a production line, one per
# environment, so each fleet has one such site (and another kind it is not asked for).
DEMO_FLEETS = [
    ("Demo Teleop Bay Berlin", [("Berlin lab bench", "lab_bench"), ("Berlin kitchen", "kitchen")]),
    (
        "Demo Factory Lyon",
        [("Lyon production line", "production_line"), ("Lyon warehouse", "warehouse_shelf")],
    ),
    ("Demo Robotics Osaka", [("Osaka lab bench", "lab_bench"), ("Osaka apartment", "household")]),
]
# With cameras (the embodiment's scene camera and the wrist camera add-on): every frame is
# rendered, encoded, checked and delivered, so the demo records at 10 fps and is delivered as
# H.264 (libx264 encodes these frames in under half of libsvtav1's CPU time; AV1 delivery is
# covered by the tests), to finish within 3 minutes on a 2-core machine.
DEMO_ORDER = {
    "task_type": "peg-insertion",
    "embodiment": "franka-fr3",
    "hours": "1",
    "environments": 2,
    "objects_per_environment": 2,  # a 2 x 2 grid of (environment, object) cells
    "calibrated_cameras": True,
    "sensors": ["wrist-camera"],
    "video_codec": "h264",
    "success_criterion": "Peg fully seated in its hole.",
    "notes": "Demo order placed by run_platform --demo.",
}


@dataclass
class DemoResult:
    order_id: str = ""
    status: str = ""
    accepted_hours: str = ""
    videos_verified: int = 0  # cameras whose every frame decoded, as many as the dataset's
    cells: list = field(default_factory=list)  # the coverage API's (environment, object) cells
    calibrations_verified: int = 0  # in meta/calibrations.json, every episode's among them
    episodes_accepted: int = 0
    episodes_rejected: int = 0
    link: str = ""
    files_verified: int = 0
    seconds_to_delivery: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and self.status == "delivered" and self.files_verified > 0


class Api:
    def __init__(self, base_url: str, key: str):
        self.base_url = base_url.rstrip("/")
        self.key = key

    def request(self, method: str, path: str, body: dict | None = None, follow: bool = True):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 - our own server
            self.base_url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.key}", "Content-Type": "application/json"},
        )
        opener = (
            urllib.request.build_opener() if follow else urllib.request.build_opener(_NoRedirect)
        )
        try:
            with opener.open(request, timeout=30) as response:
                return response.status, response.headers, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, exc.read()

    def json(self, method: str, path: str, body: dict | None = None) -> dict:
        status, _, raw = self.request(method, path, body)
        if status >= 400:
            raise RuntimeError(f"{method} {path} -> {status}: {raw[:300]!r}")
        return json.loads(raw)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def fleet_configs(directory: Path, base_url: str, *, defect_rate: float) -> list[Path]:
    """A fleet-operator organization, key and TOML file per demo fleet (fresh keys each run)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index, (name, sites) in enumerate(DEMO_FLEETS):
        organization = Organization.objects.filter(
            name=name, kind=Organization.Kind.FLEET_OPERATOR
        ).first()
        if organization is None:
            organization = accounts.organization_create(
                name=name, kind=Organization.Kind.FLEET_OPERATOR
            )
        for old in ApiKey.objects.filter(
            organization=organization, name="demo agent", revoked_at=None
        ):
            accounts.api_key_revoke(api_key=old)
        key = accounts.api_key_create(
            organization=organization, name="demo agent", role=Membership.Role.OWNER
        ).raw_key
        lines = [
            f'base_url = "{base_url}"',
            f'api_key = "{key}"',
            "",
            "[fleet]",
            f'name = "{name}"',
            "weekly_capacity_hours = 60",
            f"payout_rate_per_hour = {50 + 5 * index}",
            'currency = "USD"',
            'timezone = "UTC"',
        ]
        for site_name, kind in sites:
            lines += [
                "",
                "[[sites]]",
                f'name = "{site_name}"',
                f'kind = "{kind}"',
                'objects = ["peg-8mm", "peg-12mm", "block", "usb-c-plug"]',
                "",
                "[[sites.robots]]",
                f'name = "fr3-{site_name.lower().replace(" ", "-")}"',
                'embodiment = "franka-fr3"',
                'end_effector = "parallel_gripper"',
                'sensors = ["wrist-camera"]',
            ]
        lines += [
            "",
            "[collection]",
            "fps = 10",
            "episode_seconds = [30, 60]",
            f'operators = ["op-{index}a", "op-{index}b"]',
            f"defect_rate = {defect_rate}",
            "poll_seconds = 1",
            "heartbeat_seconds = 30",
            f"seed = {index + 1}",
        ]
        path = directory / f"fleet-{index + 1}.toml"
        path.write_text("\n".join(lines) + "\n")
        path.chmod(0o600)  # it holds a key
        paths.append(path)
    return paths


def start_agents(paths: list[Path], *, max_seconds: float) -> list[subprocess.Popen]:
    """One fleet-agent process per fleet, bounded in time; run_platform stops them at the end
    (not --once: an agent that went idle early could miss a job offered to it later)."""
    agents = []
    for path in paths:
        command = [
            sys.executable,
            "-m",
            "fleet_agent.cli",
            "--config",
            str(path),
            "--log-level",
            "WARNING",
        ]
        command += ["--max-seconds", str(int(max_seconds))]
        agents.append(subprocess.Popen(command, cwd=settings.BASE_DIR, env=dict(os.environ)))  # noqa: S603
    return agents


def wait_for_fleets(seconds: float = 90) -> bool:
    """Until every demo fleet has registered its sites and robots: an order placed before
    would find no eligible fleet and its jobs would wait, flagged, for staff."""
    from fleets.models import Robot

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        robots = Robot.objects.filter(
            fleet__organization__name__in=[name for name, _ in DEMO_FLEETS]
        ).count()
        if robots >= sum(len(sites) for _, sites in DEMO_FLEETS):  # one robot per site
            return True
        time.sleep(0.5)
    return False


def play(*, base_url: str, customer_key: str, timeout: float, verify: bool, log) -> DemoResult:
    """Place the demo order, have it paid, wait for delivery, issue (and check) the links."""
    from orders.models import Order
    from orders.services import order_mark_paid

    result = DemoResult()
    if not wait_for_fleets():
        result.problems.append("the simulated fleets did not register in time")
        return result
    api = Api(base_url, customer_key)
    started = time.monotonic()
    quote = api.json(
        "POST",
        "/api/v1/quotes",
        {
            k: DEMO_ORDER[k]
            for k in (
                "task_type",
                "embodiment",
                "hours",
                "environments",
                "objects_per_environment",
                "calibrated_cameras",
                "sensors",
            )
        },
    )
    order = api.json(
        "POST",
        "/api/v1/orders",
        {
            "quote": quote["id"],
            "success_criterion": DEMO_ORDER["success_criterion"],
            "notes": DEMO_ORDER["notes"],
            "video_codec": DEMO_ORDER["video_codec"],
        },
    )
    result.order_id = order["id"]
    log(
        f"order {order['id']} placed: {quote['total']} {quote['currency']}"
        f" for {quote['hours']} h over {quote['environments']} environments"
    )
    order_mark_paid(
        order_id=order["id"],
        caller=Caller(None, None),
        actor_label="staff:demo",
        reason="Demo: payment marked by staff.",
    )
    log("payment marked received by staff; dispatch starts")
    _wait_until_settled(order["id"], deadline=started + timeout, log=log)
    current = Order.objects.get(pk=order["id"])
    result.status = current.status
    result.accepted_hours = str(current.accepted_hours)
    result.seconds_to_delivery = time.monotonic() - started
    coverage = api.json("GET", f"/api/v1/orders/{order['id']}/coverage")
    result.episodes_accepted = coverage["episodes"]["accepted"]
    result.episodes_rejected = coverage["episodes"]["rejected"]
    _check_cells(coverage["cells"], result, log)
    if current.status != Order.Status.DELIVERED:
        result.problems.append(
            f"order not delivered within {timeout:.0f}s (status {current.status})"
        )
        return result
    if Decimal(current.accepted_hours) < current.hours:
        result.problems.append(f"accepted {current.accepted_hours} h < ordered {current.hours} h")
    [delivery] = api.json("GET", f"/api/v1/orders/{order['id']}/deliveries")["results"][:1]
    status, headers, _ = api.request(
        "GET", f"/api/v1/deliveries/{delivery['id']}/download?path=manifest.json", follow=False
    )
    if status != 302:
        result.problems.append(f"download answered {status}, not a redirect")
        return result
    result.link = headers["Location"]
    if verify:
        result.files_verified = _verify(
            api, delivery["id"], result, calibrated=DEMO_ORDER["calibrated_cameras"]
        )
    else:
        result.files_verified = 1
    return result


def _wait_until_settled(order_id: str, *, deadline: float, log) -> None:
    """Log the order's progress until it is delivered, cancelled or refunded (or time is up)."""
    from orders.models import Order

    last = ""
    while time.monotonic() < deadline:
        current = Order.objects.get(pk=order_id)
        state = f"{current.status} {current.accepted_hours}/{current.hours} h"
        if state != last:
            log(f"order: {state}")
            last = state
        if current.status in (
            Order.Status.DELIVERED,
            Order.Status.CANCELLED,
            Order.Status.REFUNDED,
        ):
            return
        time.sleep(0.25)


def _check_cells(cells: list[dict], result: DemoResult, log) -> None:
    """Every (environment, object) cell of the demo's plan filled (the coverage API's)."""
    result.cells = cells
    for cell in cells:
        log(
            f"cell {cell['environment_index']}x{cell['object_slot']}: {cell['site']}"
            f" / {cell['object']}: {cell['accepted_episodes']} episodes,"
            f" {Decimal(cell['accepted_seconds']) / 60:.1f} min ({cell['state']})"
        )
    ordered = DEMO_ORDER["environments"] * DEMO_ORDER["objects_per_environment"]
    if len(cells) != ordered or any(cell["state"] == "short" for cell in cells):
        result.problems.append(f"the {ordered} cells of the plan are not all filled")


def _verify(api: Api, delivery_id: str, result: DemoResult, *, calibrated: bool = False) -> int:
    """Download every file through its own audited link; compare with manifest.json; decode
    every delivered video and check its frames against meta/info.json's cameras; with
    `calibrated`, check every episode's camera calibrations are delivered."""

    def fetch(path: str) -> bytes:
        status, headers, _ = api.request(
            "GET", f"/api/v1/deliveries/{delivery_id}/download?path={path}", follow=False
        )
        if status != 302:
            raise RuntimeError(f"{path}: download answered {status}")
        with urllib.request.urlopen(headers["Location"], timeout=60) as response:  # noqa: S310
            return response.read()

    def check(entry: dict) -> tuple[bool, bytes | None, int]:
        """(matches the manifest, the bytes of meta/info.json, frames decoded if a video)"""
        data = fetch(entry["path"])
        if len(data) != entry["size"] or hashlib.sha256(data).hexdigest() != entry["sha256"]:
            result.problems.append(f"{entry['path']}: bytes do not match the manifest")
            return False, None, 0
        if entry["path"].startswith("videos/") and entry["path"].endswith(".mp4"):
            return True, None, _decoded_frames(data, result, entry)
        return True, data if entry["path"] == "meta/info.json" else None, 0

    manifest = json.loads(fetch("manifest.json"))
    if calibrated:
        _check_calibrations(manifest, fetch, result)
    # Four at a time (each still through its own audited link): the downloads wait on the
    # network and FFmpeg decodes without the GIL.
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(check, manifest["files"]))
    info, video_frames = {}, {}
    for entry, (matches, info_bytes, frames) in zip(manifest["files"], outcomes, strict=True):
        if info_bytes is not None:
            info = json.loads(info_bytes)
        if matches and entry["path"].startswith("videos/") and entry["path"].endswith(".mp4"):
            key = entry["path"].split("/")[1]
            video_frames[key] = video_frames.get(key, 0) + frames
    _check_videos(info, video_frames, result)
    return sum(matches for matches, _, _ in outcomes)


def _decoded_frames(data: bytes, result: DemoResult, entry: dict) -> int:
    import io

    import av

    try:
        with av.open(io.BytesIO(data)) as container:
            return sum(1 for _ in container.decode(video=0))
    except av.FFmpegError as exc:
        result.problems.append(f"{entry['path']}: does not decode ({exc})")
        return 0


def _check_videos(info: dict, video_frames: dict[str, int], result: DemoResult) -> None:
    cameras = [k for k, f in info.get("features", {}).items() if f.get("dtype") == "video"]
    if not cameras:
        result.problems.append("the demo order has cameras, but the delivery has no videos")
    if sorted(cameras) != sorted(video_frames):
        result.problems.append(f"cameras {sorted(cameras)} but videos of {sorted(video_frames)}")
    for key in cameras:
        if video_frames.get(key) != info.get("total_frames"):
            result.problems.append(
                f"{key}: {video_frames.get(key)} frames decoded, {info.get('total_frames')} in"
                " the dataset"
            )
    result.videos_verified = len(cameras) if not result.problems else 0


def _check_calibrations(manifest: dict, fetch, result: DemoResult) -> None:
    """The order asks for calibrated cameras: the delivery ships them, and every episode's
    calibration ids (meta/episodes' calibration_id) are in meta/calibrations.json."""
    import io

    import pyarrow.parquet as pq

    listed = manifest.get("calibrations") or {}
    if not listed.get("path"):
        result.problems.append("the order asks for calibrated cameras; none is delivered")
        return
    calibrations = json.loads(fetch(listed["path"]))
    named = set()
    for entry in manifest["files"]:
        if entry["path"].startswith("meta/episodes/") and entry["path"].endswith(".parquet"):
            table = pq.read_table(io.BytesIO(fetch(entry["path"])), columns=["calibration_id"])
            for ids in table.column("calibration_id").to_pylist():
                named.update(json.loads(ids).values())
    if not named or not named <= set(calibrations):
        result.problems.append(f"episodes name calibrations {sorted(named - set(calibrations))}")
    result.calibrations_verified = len(calibrations)
