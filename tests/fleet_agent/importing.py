"""Shared by the import tests: a job with a camera held by an agent's fleet on the running
platform (live_server + local S3 + eager QA), recordings in the episode-folder format, the
agent and mapping files, and a counting HTTP proxy the importer subprocess goes through."""

from __future__ import annotations

import http.client
import json
import threading
import urllib.parse
from dataclasses import dataclass
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq

from fleet_agent import FleetAgent
from fleet_agent.cameras import render_camera_videos
from fleet_agent.episodes import make_episode
from fleets.models import Job
from fleets.services.planning import order_plan
from orders.models import Embodiment, Order
from orders.streams import build_stream_spec
from tests.factories import OrderFactory
from tests.fleet_agent.test_integration import config_for

CAMERAS = ("observation.images.scene", "observation.images.wrist")  # a wrist-camera order's
FPS = 30


@dataclass
class Held:
    """A job the agent's fleet holds, and the files `fleet-agent import` reads."""

    job_id: str
    order: Order
    config_path: Path
    mapping_path: Path
    agent: FleetAgent


def held_job(platform: str, operator, customer, tmp_path: Path, hours: str = "0.05") -> Held:
    agent = FleetAgent(config_for(platform, operator.raw_key))
    agent.register()
    order = OrderFactory(
        organization=customer.organization,
        hours=Decimal(hours),
        environments=1,
        status=Order.Status.PAID,
        sensor_slugs=["wrist-camera"],
    )
    order.stream_spec = build_stream_spec(
        embodiment=order.embodiment, sensor_slugs=["wrist-camera"]
    )
    order.save(update_fields=["stream_spec"])
    order_plan(order_id=order.id)
    assert agent.handle_offers() == 1
    job = Job.objects.get(order=order)
    assert job.status == Job.Status.ASSIGNED
    config_path = tmp_path / "fleet.toml"
    config_path.write_text(
        f'base_url = "{platform}"\napi_key = "{operator.raw_key}"\n'
        '[fleet]\nname = "Agent Fleet"\nweekly_capacity_hours = 40\npayout_rate_per_hour = 55\n'
        '[[sites]]\nname = "Bench A"\nkind = "lab_bench"\n'
    )
    mapping_path = tmp_path / "map.toml"
    mapping_path.write_text(
        f'job = "{job.id}"\nformat = "episode-folder"\noperator = "op-3"\n'
        'task_instruction = "insert the peg"\n'
    )
    return Held(str(job.id), order, config_path, mapping_path, agent)


def write_recording(folder: Path, name: str, *, seed: int, seconds: float = 4.0) -> dict:
    """`<name>.parquet`, `<name>.scene.mp4`, `<name>.wrist.mp4` and a sidecar: a clean FR3
    episode QA accepts, with the two cameras a wrist-camera order records."""
    folder.mkdir(parents=True, exist_ok=True)
    fr3 = Embodiment.objects.get(slug="franka-fr3")
    episode = make_episode(
        action_dim=fr3.action_dim,
        fps=FPS,
        seconds=seconds,
        seed=seed,
        state_limits=fr3.state_limits or None,
    )
    videos = render_camera_videos(
        {"observation.state": episode.state},
        [{"key": key, "min_width": 320, "min_height": 240} for key in CAMERAS],
        FPS,
        seed=seed,
    )
    (folder / f"{name}.parquet").write_bytes(episode.data)
    for key, video in videos.items():
        (folder / f"{name}.{key.removeprefix('observation.images.')}.mp4").write_bytes(video)
    (folder / f"{name}.json").write_text(json.dumps({"operator": f"op-{seed % 5}"}))
    return {"sha256": episode.sha256, "frames": episode.frames, "videos": videos}


def parquet_rows(path: Path) -> int:
    return pq.read_metadata(path).num_rows


class CountingProxy:
    """A forward HTTP proxy (the importer's `http_proxy`) that records every request and
    forwards it unchanged (same Host, path and query: presigned signatures stay valid).
    `hold(method, path, query) -> "before" | "after" | None` stops one request: "before"
    never forwards it, "after" forwards it and withholds the answer; either way `held` is
    set and the connection is dropped once `release` is set (the test kills the client)."""

    def __init__(self, hold=None):
        self.hold = hold
        self.requests: list[tuple[str, str, str, bool]] = []  # method, path, query, forwarded
        self.held = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return None

            def _any(self):
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def forwarded(self, method: str, contains: str = "") -> list[tuple[str, str]]:
        with self._lock:
            return [
                (path, query)
                for m, path, query, sent in self.requests
                if m == method and sent and contains in path
            ]

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        target = urllib.parse.urlsplit(handler.path)
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        mode = self.hold(handler.command, target.path, target.query) if self.hold else None
        if mode == "before":
            self._note(handler.command, target, forwarded=False)
            self._stall(handler)
            return
        status, headers, data = self._forward(handler, target, body)
        self._note(handler.command, target, forwarded=True)
        if mode == "after":
            self._stall(handler)
            return
        handler.send_response(status)
        for name, value in headers:
            if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _note(self, method, target, *, forwarded: bool) -> None:
        with self._lock:
            self.requests.append((method, target.path, target.query, forwarded))

    def _stall(self, handler) -> None:
        self.held.set()
        self.release.wait(60)
        handler.close_connection = True

    @staticmethod
    def _forward(handler, target, body):
        skip = {"proxy-connection", "connection", "keep-alive"}
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in skip}
        connection = http.client.HTTPConnection(target.hostname, target.port, timeout=120)
        try:
            path = target.path + (f"?{target.query}" if target.query else "")
            connection.request(handler.command, path, body=body or None, headers=headers)
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()
