"""The fleet agent: register, take offers, collect and upload episodes until jobs are done.

One pass (`FleetAgent.step`) does, in order:

1. a fleet heartbeat when one is due (`collection.heartbeat_seconds`);
2. every pending offer: accept it when a robot at the offered site can do the job
   (embodiment, end effector, sensors), else decline it with the reason;
3. every job the fleet holds that is `assigned` or `in_progress`: read its episodes
   (`GET /fleet/jobs/<id>/episodes`), add up the accepted time, report progress, and when
   accepted plus still-undecided time falls short of the job's target, "collect" one more
   episode, register it, PUT its bytes (one PUT or multipart, as the instructions say),
   and complete it. Rejected episodes simply do not count, so they are re-collected.

`run()` repeats passes until stopped (`stop()`, or SIGINT/SIGTERM in the CLI), a time limit,
or, with `stop_when_idle`, until nothing is left to do. `run_once(max_seconds=...)` is the
bounded mode for tests and demos. Only the public HTTP API is used (see client.py).
"""

from __future__ import annotations

import logging
import math
import random
import re
import threading
import time
from dataclasses import dataclass
from decimal import ROUND_DOWN, Decimal

from fleet_agent import uploads
from fleet_agent.cameras import VIDEO_DEFECTS
from fleet_agent.client import ApiClient, ApiError, TransientError
from fleet_agent.config import AgentConfig, SiteConfig
from fleet_agent.episodes import AGENT_DEFECTS, Episode, choose_defect, make_episode, resubmitted
from fleet_agent.plan import CollectionPlan
from fleet_agent.summary import RunSummary
from fleet_agent.webhooks import WebhookReceiver

log = logging.getLogger("fleet_agent")

WORKING = ("assigned", "in_progress")
DECIDED = ("accepted", "rejected")
FPS_IN_MESSAGE = re.compile(r"recorded at (\d+) fps")


@dataclass
class _Upload:
    """An episode this agent uploaded and whose verdict it is waiting for."""

    job_id: str
    seconds: float
    defect: str | None
    parts: list | None = None  # multipart: the parts' ETags, to complete again if need be
    video_parts: list | None = None  # the same for multipart camera videos
    status: str = "uploaded"  # then accepted, rejected, or abandoned
    handled: str | None = None  # the object it counts for (its cell's)


class FleetAgent:
    """A reference fleet: see the module docstring. Thread-safe to `stop()` from elsewhere."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        client: ApiClient | None = None,
        defect_rate: float | None = None,
        seed: int | None = None,
        only_job: str | None = None,
        plan_defects: list[str] | None = None,
    ):
        self.config = config
        # --job: work on this one job only (the job page's "start collecting"); take no offers
        self.only_job = only_job
        self.client = client or ApiClient(config.base_url, config.api_key)
        self.defect_rate = config.collection.defect_rate if defect_rate is None else defect_rate
        if not 0 <= self.defect_rate <= 1:
            raise ValueError("defect_rate must be between 0 and 1")
        seed = config.collection.seed if seed is None else seed
        self.rng = random.Random(seed)
        self.summary = RunSummary()
        self.fleet: dict | None = None
        self.webhook_secret: str | None = None  # only when this run created the fleet
        self.sites: dict[str, dict] = {}  # id -> site
        self.site_configs: dict[str, SiteConfig] = {}  # id -> its configuration
        self.robots: list[dict] = []
        self._embodiments: dict[str, dict] = {}
        self._last_clean: dict[str, Episode] = {}  # per job, for the near_duplicate defect
        self._order_fps: dict[str, int] = {}
        self._uploads: dict[str, _Upload] = {}  # episode id -> upload
        self._reported: dict[str, tuple[Decimal, float]] = {}  # job -> (hours, when)
        self._last_heartbeat = -math.inf
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and by webhooks: do not wait to poll
        self._idle = False
        self.receiver: WebhookReceiver | None = None
        # objects, scenes, calibrations; plan_defects (None: the config's) each sent once
        self.plan = CollectionPlan(config, self.client, plan_defects)
        self.plan.registered = self.summary.plan_registered

    # --- registration -------------------------------------------------------------------

    def register(self) -> dict:
        """Find or create the fleet, its sites and robots by name; update what differs."""
        wanted = self.config.fleet
        body = {
            "name": wanted.name,
            "weekly_capacity_hours": str(wanted.weekly_capacity_hours),
            "payout_rate_per_hour": str(wanted.payout_rate_per_hour),
            "currency": wanted.currency,
            "timezone": wanted.timezone,
            "webhook_url": wanted.webhook_url,
        }
        if self.config.webhook is not None:
            body["webhook_url"] = self._start_receiver()
        fleet = next((f for f in self.client.fleets() if f["name"] == wanted.name), None)
        if fleet is None:
            fleet = self.client.create_fleet(body)
            self.webhook_secret = fleet.get("webhook_secret")
            log.info("created fleet %s (%s)", wanted.name, fleet["id"])
        else:
            changes = {k: v for k, v in body.items() if not _same(fleet.get(k), v)}
            if fleet.get("status") != "active":
                changes["status"] = "active"
            if changes:
                fleet = self.client.update_fleet(fleet["id"], changes)
                log.info("updated fleet %s: %s", wanted.name, ", ".join(sorted(changes)))
            else:
                log.info("reusing fleet %s (%s)", wanted.name, fleet["id"])
        self.fleet = fleet
        if self.receiver is not None and not self.webhook_secret:
            # The secret is shown only at creation: our receiver needs one, so rotate it.
            self.webhook_secret = self.client.rotate_secret(fleet["id"])["webhook_secret"]
            log.info("rotated the webhook secret of fleet %s for this receiver", wanted.name)

        existing_sites = [s for s in self.client.sites() if s["fleet"] == fleet["id"]]
        existing_robots = self.client.robots()
        self.sites, self.site_configs, self.robots = {}, {}, []
        for site_config in self.config.sites:
            site = self._ensure_site(site_config, existing_sites)
            self.sites[site["id"]] = site
            self.site_configs[site["id"]] = site_config
            for robot_config in site_config.robots:
                self.robots.append(self._ensure_robot(site, robot_config, existing_robots))
        self.plan.register(self.sites, self.site_configs, self.robots)
        return {"fleet": self.fleet, "sites": list(self.sites.values()), "robots": self.robots}

    def _start_receiver(self) -> str:
        if self.receiver is None:
            wanted = self.config.webhook
            self.receiver = WebhookReceiver(
                secret=lambda: self.webhook_secret,
                on_event=self._on_webhook,
                host=wanted.host,
                port=wanted.port,
            )
            self.receiver.start()
        return self.config.webhook.url or self.receiver.url

    def _on_webhook(self, payload: dict) -> None:
        """offer.created, offer.expired, job.assigned, job.cancelled: look now, not later."""
        event = str(payload.get("type", "unknown"))
        self.summary.webhooks_received[event] += 1
        log.info("webhook %s received", event)
        self._wake.set()

    def close(self) -> None:
        """Stop the webhook receiver, if any (run() leaves it up between runs)."""
        if self.receiver is not None:
            self.receiver.stop()
            self.receiver = None

    def _ensure_site(self, wanted: SiteConfig, existing: list[dict]) -> dict:
        body = {
            "name": wanted.name,
            "kind": wanted.kind,
            "objects_available": sorted(set(wanted.objects)),
            "description": wanted.description,
            "active": True,
        }
        site = next((s for s in existing if s["name"] == wanted.name), None)
        if site is None:
            site = self.client.create_site({"fleet": self.fleet["id"], **body})
            log.info("created site %s (%s)", wanted.name, site["id"])
            return site
        changes = {k: v for k, v in body.items() if not _same(site.get(k), v)}
        if changes:
            site = self.client.update_site(site["id"], changes)
            log.info("updated site %s: %s", wanted.name, ", ".join(sorted(changes)))
        return site

    def _ensure_robot(self, site: dict, wanted, existing: list[dict]) -> dict:
        body = {
            "name": wanted.name,
            "embodiment": wanted.embodiment,
            "end_effector": wanted.end_effector,
            "sensors": sorted(set(wanted.sensors)),
            "active": True,
        }
        robot = next(
            (r for r in existing if r["site"] == site["id"] and r["name"] == wanted.name), None
        )
        if robot is None:
            robot = self.client.create_robot({"site": site["id"], **body})
            log.info("created robot %s at %s", wanted.name, site["name"])
            return robot
        changes = {k: v for k, v in body.items() if not _same(robot.get(k), v)}
        if changes:
            robot = self.client.update_robot(robot["id"], changes)
            log.info("updated robot %s: %s", wanted.name, ", ".join(sorted(changes)))
        return robot

    # --- one pass -------------------------------------------------------------------------

    def heartbeat(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_heartbeat >= self.config.collection.heartbeat_seconds:
            self.client.heartbeat(self.fleet["id"])
            self._last_heartbeat = now

    def handle_offers(self) -> int:
        """Accept the pending offers a robot can do, decline the others; returns # accepted."""
        accepted = 0
        for offer in self.client.offers("pending"):
            if offer["fleet"] != self.fleet["id"]:
                continue  # another fleet of the same organization (another agent's)
            job = offer["job"]
            robot = self._robot_for(offer["site"], job)
            if robot is None:
                reason = (
                    f"No active robot at this site with {job['embodiment']}, "
                    f"{job['end_effector']} and sensors {job.get('sensors') or []}."
                )
                try:
                    self.client.decline_offer(offer["id"], reason)
                    self.summary.offers_declined += 1
                    log.info("declined offer %s: %s", offer["id"], reason)
                except ApiError as exc:
                    log.warning("could not decline offer %s: %s", offer["id"], exc)
                continue
            try:
                self.client.accept_offer(offer["id"])
            except ApiError as exc:  # taken, expired or withdrawn meanwhile
                log.info("offer %s not accepted: %s", offer["id"], exc)
                continue
            accepted += 1
            self.summary.offers_accepted += 1
            log.info(
                "accepted offer %s: job %s, %s h of %s",
                offer["id"],
                job["id"],
                job["target_hours"],
                job["task_type"],
            )
        return accepted

    def step(self) -> bool:
        """One pass (see the module docstring). True if it did work (accepted, uploaded)."""
        if self.fleet is None:
            self.register()
        self.heartbeat()
        busy = self.handle_offers() > 0 if self.only_job is None else False
        jobs = [
            j
            for j in self.client.jobs()
            if j.get("fleet") == self.fleet["id"]
            and (self.only_job is None or j["id"] == self.only_job)
        ]
        working = [j for j in jobs if j["status"] in WORKING]
        for job in jobs:
            if job["status"] != "completed":
                continue
            mine = [u for u in self._uploads.values() if u.job_id == job["id"]]
            if mine and (
                job["id"] not in self.summary.jobs_completed
                or any(u.status == "uploaded" for u in mine)
            ):
                self._refresh(job)  # count the verdicts that came after the last pass
            if mine and job["id"] not in self.summary.jobs_completed:
                self.summary.jobs_completed.add(job["id"])
                log.info("job %s completed", job["id"])
        for job in working:
            if self._stop.is_set():
                break
            try:
                busy = self.work_on(job) or busy
            except ApiError as exc:
                if exc.status in (401, 403):
                    raise
                self._error(f"job {job['id']}: {exc}")
        working_ids = {j["id"] for j in working}
        waiting = any(
            u.status == "uploaded" and u.job_id in working_ids for u in self._uploads.values()
        )
        self._idle = not busy and not working and not waiting
        return busy

    def work_on(self, job: dict) -> bool:
        """Report progress; collect and upload one episode if the job still needs time."""
        try:
            return self._work_on(job)
        except ApiError as exc:
            if exc.status == 404 or exc.code == "job_not_active":
                log.info("job %s is no longer ours to work on: %s", job["id"], exc.message)
                return False
            if exc.code == "job_fully_booked":  # wait for QA's verdicts on what is in flight
                log.info("job %s: %s", job["id"], exc.message)
                return False
            raise

    def _work_on(self, job: dict) -> bool:
        accepted, in_flight = self._refresh(job)
        target = Decimal(job.get("target_seconds") or Decimal(job["target_hours"]) * 3600)
        self._report_progress(job, accepted)
        missing = target - accepted - in_flight
        if missing <= 0:
            return False  # enough is accepted or waiting for QA
        self.collect_and_upload(job, float(missing))
        return True

    def _refresh(self, job: dict) -> tuple[Decimal, Decimal]:
        """(accepted, undecided) seconds of the job; counts verdicts on our uploads."""
        accepted = Decimal(0)
        in_flight = Decimal(0)
        for episode in self.client.episodes(job["id"]):
            status = episode["status"]
            mine = self._uploads.get(episode["id"])
            if status == "accepted":
                accepted += Decimal(str(episode["duration_seconds"] or 0))
            elif status == "uploaded":
                seconds = mine.seconds if mine else self.config.collection.min_episode_seconds
                in_flight += Decimal(str(seconds))
            if mine is not None and status == "registered" and mine.status == "uploaded":
                self._complete_again(episode["id"], mine)
            elif mine is not None:
                self._record_verdict(episode["id"], mine, episode)
        return accepted, in_flight

    def _record_verdict(self, episode_id: str, upload: _Upload, episode: dict) -> None:
        status = episode["status"]
        if upload.status in DECIDED or status not in DECIDED:
            return
        upload.status = status
        if status == "accepted":
            self.summary.episodes_accepted += 1
            if upload.defect:
                log.warning("episode %s accepted despite defect %s", episode_id, upload.defect)
        else:
            self.summary.episodes_rejected += 1
            codes = [f["code"] for f in episode.get("qa_failures") or []]
            self.summary.rejection_reasons.update(codes)
            if not upload.defect:
                self.plan.refused(upload.job_id, upload.handled, codes)
            log.info(
                "episode %s rejected (%s; defect we made: %s): will re-collect",
                episode_id,
                ", ".join(codes) or "no reason given",
                upload.defect,
            )

    def _complete_again(self, episode_id: str, upload: _Upload) -> None:
        """The bytes went up but `complete` never arrived: send it again, or give up on it."""
        try:
            self.client.complete_episode(episode_id, upload.parts, upload.video_parts)
        except ApiError as exc:
            upload.status = "abandoned"
            log.warning("episode %s abandoned: %s", episode_id, exc)

    def _report_progress(self, job: dict, accepted_seconds: Decimal) -> None:
        target = Decimal(job["target_hours"])
        hours = min(target, (accepted_seconds / 3600).quantize(Decimal("0.01"), ROUND_DOWN))
        last = self._reported.get(job["id"])
        now = time.monotonic()
        due = last is None or last[0] != hours
        due = due or now - last[1] >= self.config.collection.heartbeat_seconds
        if due:
            self.client.report_progress(job["id"], str(hours))
            self._reported[job["id"]] = (hours, now)

    # --- collecting and uploading -----------------------------------------------------------

    def collect_and_upload(self, job: dict, missing_seconds: float) -> str:
        """Record (synthesize) one episode for the job, upload it, complete it; its id."""
        collection = self.config.collection
        robot = self._robot_for(job["site"], job)
        if robot is None:
            raise ApiError(0, "no_robot", f"No robot at site {job['site']} can do job {job['id']}.")
        fps = self._order_fps.get(job["order"], collection.fps)
        seconds = self.rng.uniform(collection.min_episode_seconds, collection.max_episode_seconds)
        if missing_seconds < seconds:  # the last one: just enough, a frame to spare
            needed = (math.ceil(missing_seconds * fps) + 1) / fps
            seconds = max(collection.min_episode_seconds, needed)
        cameras = uploads.cameras_of(job)
        kinds = AGENT_DEFECTS + (VIDEO_DEFECTS if cameras else ())
        plan_defect = self.plan.next_defect(job, robot)
        defect = None if plan_defect else choose_defect(self.rng, self.defect_rate, kinds)
        video_defect = defect if defect in VIDEO_DEFECTS else None
        episode, defect = self._record(job, fps, seconds, defect, video_defect)
        videos = uploads.videos_for(
            job, episode, seed=self.rng.getrandbits(16), defect=video_defect
        )
        plan_fields, handled = self.plan.episode_fields(job, robot, plan_defect)
        defect = defect or plan_defect
        body = {
            "site": job["site"],
            "robot": robot["id"],
            "operator": self.rng.choice(collection.operators),
            "task_instruction": job["task_type"].replace("-", " "),
            "success": self.rng.random() < collection.success_rate,
            "fps": fps,
            "size_bytes": episode.size_bytes,
            "sha256": episode.sha256,
            "frames": episode.frames,
            **plan_fields,
            "videos": uploads.declarations(videos),
        }
        try:
            registered = uploads.register(self.client, job["id"], body, episode.data)
        except ApiError as exc:
            order_fps = _order_fps(exc)
            if order_fps is None or order_fps == fps:
                raise
            log.info("order %s is recorded at %d fps: switching", job["order"], order_fps)
            self._order_fps[job["order"]] = order_fps
            return self.collect_and_upload(job, missing_seconds)
        episode_id = registered["id"]
        self.plan.sent(plan_defect)
        parts, video_parts = uploads.put_all(
            self.client, episode_id, registered["upload"], episode.data, videos
        )
        upload = _Upload(
            job["id"], episode.duration_seconds, defect, parts, video_parts, handled=handled
        )
        self._uploads[episode_id] = upload
        self.summary.episodes_uploaded += 1
        self.summary.uploads_by_method[registered["upload"]["method"]] += 1
        if defect:
            self.summary.defective_uploaded += 1
        completed = self.client.complete_episode(episode_id, parts, video_parts)
        self._record_verdict(episode_id, self._uploads[episode_id], completed)
        log.info(
            "uploaded episode %s for job %s: %.1f s, %d bytes, %s%s",
            episode_id,
            job["id"],
            episode.duration_seconds,
            episode.size_bytes,
            registered["upload"]["method"],
            f", defect {defect}" if defect else "",
        )
        return episode_id

    def _record(self, job, fps, seconds, defect, video_defect) -> tuple[Episode, str | None]:
        """The episode's parquet (with a file or content defect), and the defect it has."""
        embodiment, last = self._embodiment(job["embodiment"]), self._last_clean.get(job["id"])
        if defect == "near_duplicate" and last is not None:
            return resubmitted(last), defect  # the previous clean episode, sent again
        defect = None if defect == "near_duplicate" else defect
        episode = make_episode(
            action_dim=int(embodiment["action_dim"]),
            fps=fps,
            seconds=seconds,
            seed=self.rng.getrandbits(32),
            defect=None if video_defect else defect,
            state_limits=embodiment.get("state_limits") or None,
            vectors=uploads.vectors_of(job),
        )
        self._last_clean[job["id"]] = episode if defect is None else last
        return episode, defect

    def _put(self, episode_id: str, upload: dict, episode: Episode) -> list[dict] | None:
        """Send the parquet as instructed; renew the URLs once if storage refuses them."""
        return uploads.put_all(self.client, episode_id, upload, episode.data, {})[0]

    # --- running --------------------------------------------------------------------------

    def run(
        self,
        *,
        max_seconds: float | None = None,
        stop_when_idle: bool = False,
        wait_for_work: bool = False,
    ) -> RunSummary:
        """Passes until stop(), max_seconds, or (stop_when_idle) nothing left to do.

        With `wait_for_work`, being idle ends the run only after at least one job this agent
        worked on has completed (a demo can start agents before the order is placed).
        """
        started = time.monotonic()
        deadline = None if max_seconds is None else started + max_seconds
        reason = "stopped"
        if self.fleet is None:
            self.register()
        while True:
            if self._stop.is_set():
                reason = "stopped"
                break
            if deadline is not None and time.monotonic() >= deadline:
                reason = "time limit"
                break
            try:
                busy = self.step()
            except TransientError as exc:  # the platform is down: keep trying, slowly
                self._error(str(exc))
                busy = False
            except ApiError as exc:
                if exc.status in (401, 403):
                    raise  # a revoked key or a role that cannot operate: no point going on
                self._error(str(exc))
                busy = False
            if stop_when_idle and self._idle and (not wait_for_work or self.summary.jobs_completed):
                reason = "idle"
                break
            if not busy:
                wait = self.config.collection.poll_seconds
                if deadline is not None:
                    wait = max(0.0, min(wait, deadline - time.monotonic()))
                self._wake.wait(wait)
                self._wake.clear()
        self.summary.elapsed_seconds += time.monotonic() - started
        self.summary.stopped_because = reason
        log.info("run ended (%s): %s", reason, self.summary.as_dict())
        return self.summary

    def run_once(self, max_seconds: float = 300.0, *, wait_for_work: bool = False) -> RunSummary:
        """Bounded run: until held jobs are done and no offer is pending, or max_seconds."""
        return self.run(max_seconds=max_seconds, stop_when_idle=True, wait_for_work=wait_for_work)

    def stop(self) -> None:
        """Finish the current upload, then return from run()."""
        self._stop.set()
        self._wake.set()

    # --- helpers ------------------------------------------------------------------------------

    def _robot_for(self, site_id: str, job: dict) -> dict | None:
        sensors = set(job.get("sensors") or [])
        for robot in self.robots:
            if (
                robot["site"] == site_id
                and robot.get("active", True)
                and robot["embodiment"] == job["embodiment"]
                and robot["end_effector"] == job["end_effector"]
                and sensors <= set(robot.get("sensors") or [])
            ):
                return robot
        return None

    def _embodiment(self, embodiment: str) -> dict:
        """The catalog's entry: action_dim and the state_limits content QA checks."""
        if embodiment not in self._embodiments:
            self._embodiments = self.client.embodiments()
        if embodiment not in self._embodiments:
            raise ApiError(0, "unknown_embodiment", f"{embodiment!r} is not in the catalog.")
        return self._embodiments[embodiment]

    def _error(self, message: str) -> None:
        log.error("%s", message)
        self.summary.errors.append(message)


def _same(current, wanted) -> bool:
    """Compare an API value with a configured one (numbers arrive as decimal strings)."""
    if isinstance(wanted, list):
        return sorted(current or []) == sorted(wanted)
    if isinstance(wanted, str) and isinstance(current, str):
        try:
            return Decimal(current) == Decimal(wanted)
        except ArithmeticError:
            return current == wanted
    return current == wanted


def _order_fps(exc: ApiError) -> int | None:
    """The order's frame rate, from the 400 an episode at another rate gets."""
    if exc.status != 400 or "fps" not in exc.fields:
        return None
    match = FPS_IN_MESSAGE.search(" ".join(map(str, exc.fields["fps"])) + " " + exc.message)
    return int(match.group(1)) if match else None
