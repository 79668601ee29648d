"""The fleet agent's client of the marketplace's public fleet API.

The transport (retries with exponential backoff on connection errors, timeouts, 5xx and 429
honouring Retry-After; every 4xx an `ApiError` with the platform's `code`, `message` and
`fields`) is `marketplace_client.http.ApiClient`, shared with the customer download command;
this module adds the fleet API's calls.

Retrying a POST is only safe when the server can tell it is a repeat: episode registration
takes an `Idempotency-Key`, and the agent passes one. Other POSTs the agent makes (accept an
offer, complete an episode, heartbeats) are harmless to repeat: a second accept answers
409, a second complete is a no-op.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from marketplace_client.http import ApiClient as BaseClient
from marketplace_client.http import (
    ApiError,
    Response,
    RetryPolicy,
    TransientError,
)

__all__ = ["ApiClient", "ApiError", "Response", "RetryPolicy", "TransientError"]

USER_AGENT = "fleet-agent/0.1 (+reference client)"


@dataclass
class ApiClient(BaseClient):
    """`base_url` is the site root (e.g. http://127.0.0.1:8000); paths are under /api/v1/."""

    user_agent: str = USER_AGENT

    # --- the fleet API -----------------------------------------------------------------

    def embodiments(self) -> dict[str, dict]:
        return {e["slug"]: e for e in self.list_all("catalog/embodiments")}

    def sensors(self) -> dict[str, dict]:
        """The catalog's sensor add-ons by slug (a camera's `stream`: name, resolution)."""
        return {s["slug"]: s for s in self.list_all("catalog/sensors")}

    def fleets(self) -> list[dict]:
        return list(self.list_all("fleet/fleets"))

    def create_fleet(self, body: dict) -> dict:
        return self.post("fleet/fleets", body)

    def update_fleet(self, fleet_id: str, body: dict) -> dict:
        return self.patch(f"fleet/fleets/{fleet_id}", body)

    def rotate_secret(self, fleet_id: str) -> dict:
        return self.post(f"fleet/fleets/{fleet_id}/rotate-secret")

    def heartbeat(self, fleet_id: str) -> dict:
        return self.post(f"fleet/fleets/{fleet_id}/heartbeat")

    def sites(self) -> list[dict]:
        return list(self.list_all("fleet/sites"))

    def create_site(self, body: dict) -> dict:
        return self.post("fleet/sites", body)

    def update_site(self, site_id: str, body: dict) -> dict:
        return self.patch(f"fleet/sites/{site_id}", body)

    def robots(self) -> list[dict]:
        return list(self.list_all("fleet/robots"))

    def create_robot(self, body: dict) -> dict:
        return self.post("fleet/robots", body)

    def update_robot(self, robot_id: str, body: dict) -> dict:
        return self.patch(f"fleet/robots/{robot_id}", body)

    # --- the collection plan (issue 30): a site's objects and scenes, camera calibrations ---

    def site_objects(self, site: str | None = None) -> list[dict]:
        """The fleet's objects (of one site with `site`, an id); their name is their identity."""
        return [o for o in self.list_all("fleet/objects") if site is None or o["site"] == site]

    def create_site_object(self, body: dict) -> dict:
        """body: site, name, category?, size_class? (small|medium|large), photo_url?, notes?"""
        return self.post("fleet/objects", body)

    def site_object(self, object_id: str) -> dict:
        return self.get(f"fleet/objects/{object_id}")

    def update_site_object(self, object_id: str, body: dict) -> dict:
        """body: category, size_class, photo_url, notes, active (never the name)."""
        return self.patch(f"fleet/objects/{object_id}", body)

    def scenes(self, site: str | None = None) -> list[dict]:
        return [s for s in self.list_all("fleet/scenes") if site is None or s["site"] == site]

    def create_scene(self, body: dict) -> dict:
        """body: site, name, table?, background?, lighting?, camera_placement?, notes?,
        arranged_at? (default: now). A moved robot or camera is a new scene."""
        return self.post("fleet/scenes", body)

    def scene(self, scene_id: str) -> dict:
        return self.get(f"fleet/scenes/{scene_id}")

    def update_scene(self, scene_id: str, body: dict) -> dict:
        """body: notes, active only."""
        return self.patch(f"fleet/scenes/{scene_id}", body)

    def calibrations(self, robot: str | None = None, camera: str | None = None) -> list[dict]:
        params = {k: v for k, v in (("robot", robot), ("camera", camera)) if v is not None}
        return [
            c
            for c in self.list_all("fleet/calibrations", **params)
            if (robot is None or c["robot"] == robot) and (camera is None or c["camera"] == camera)
        ]

    def create_calibration(self, body: dict) -> dict:
        """body: robot, camera, calibrated_at, width, height, fx, fy, cx, cy,
        distortion_model, distortion_coefficients, extrinsics, reference_frame? (never edited:
        a recalibration is a new one)."""
        return self.post("fleet/calibrations", body)

    def calibration(self, calibration_id: str) -> dict:
        return self.get(f"fleet/calibrations/{calibration_id}")

    def offers(self, status: str = "pending") -> list[dict]:
        return list(self.list_all("fleet/offers", status=status))

    def accept_offer(self, offer_id: str) -> dict:
        return self.post(f"fleet/offers/{offer_id}/accept")

    def decline_offer(self, offer_id: str, reason: str = "") -> dict:
        return self.post(f"fleet/offers/{offer_id}/decline", {"reason": reason})

    def jobs(self) -> list[dict]:
        return list(self.list_all("fleet/jobs"))

    def report_progress(self, job_id: str, progress_hours: str | None = None) -> dict:
        return self.post(f"fleet/jobs/{job_id}/progress", {"progress_hours": progress_hours})

    def episodes(self, job_id: str) -> list[dict]:
        return list(self.list_all(f"fleet/jobs/{job_id}/episodes", page_size=200))

    def register_episode(self, job_id: str, body: dict, idempotency_key: str) -> dict:
        return self.post(
            f"fleet/jobs/{job_id}/episodes", body, headers={"Idempotency-Key": idempotency_key}
        )

    def register_episode_replayed(
        self, job_id: str, body: dict, idempotency_key: str
    ) -> tuple[dict, bool]:
        """`register_episode`, and whether the platform answered from an earlier request
        with this key (`Idempotent-Replayed`): the episode may be further along by now."""
        response = self.send(
            "POST",
            self.url(f"fleet/jobs/{job_id}/episodes"),
            data=json.dumps(body).encode(),
            headers={
                "Accept": "application/json",
                "Content-Type": "application/json",
                "Idempotency-Key": idempotency_key,
            },
        )
        return response.json(), response.headers.get("idempotent-replayed") == "true"

    def episode(self, episode_id: str) -> dict:
        return self.get(f"fleet/episodes/{episode_id}")

    def renew_upload(self, episode_id: str) -> dict:
        return self.post(f"fleet/episodes/{episode_id}/upload")

    def complete_episode(
        self, episode_id: str, parts: list[dict] | None = None, videos: list[dict] | None = None
    ) -> dict:
        """`parts`: the parquet's multipart ETags; `videos`: [{"camera_key", "parts"}] of the
        multipart camera videos (fleet_agent/uploads.py)."""
        body = {"parts": parts} if parts else {}
        if videos:
            body["videos"] = videos
        return self.post(f"fleet/episodes/{episode_id}/complete", body)

    def put_parts(self, upload: dict, data: bytes) -> list[dict]:
        """PUT each part of a multipart upload to its presigned URL; the parts (number and
        ETag) `complete_episode` needs."""
        size = int(upload["part_size"])
        parts = []
        for part in upload["parts"]:
            number = int(part["part_number"])
            chunk = data[(number - 1) * size : number * size]
            response = self.put_bytes(part["url"], chunk, part["headers"])
            etag = response.headers.get("etag")
            if not etag:
                raise ApiError(response.status, "no_etag", f"Part {number}: storage sent no ETag.")
            parts.append({"part_number": number, "etag": etag})
        return parts
