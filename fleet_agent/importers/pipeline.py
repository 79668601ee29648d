"""Register, upload and complete each recording of a source exactly once, resumably.

`import_recordings(client, mapping, source, journal)` reads the recordings one at a time
(only one is in memory) and, for each:

1. skips it if the journal has it completed;
2. checks it locally: the job's cameras each have a video, operator and task are known, and,
   when `fleet_agent/importers/local_checks.py` exists, `check_recording(recording, job,
   embodiment)` with the catalog's entry for the job's embodiment (`GET catalog/embodiments`:
   its joint limits and content thresholds), the platform's own QA rules, run before any
   byte is sent: a problem found there is reported and nothing is uploaded (the module is
   optional, imported inside a `try/except ModuleNotFoundError`);
3. registers it (`POST jobs/<id>/episodes`) with an `Idempotency-Key` derived from (job,
   source id, SHA-256): a crash between the platform's answer and the journal's note gets
   the same episode back (the platform replays its first answer) instead of a second one;
4. PUTs each file not yet sent to the current instructions (a multipart file part by part,
   each part's ETag journaled as it lands), renewing the URLs once if storage refuses them
   (expired: the platform then gives fresh keys for every file, so all go up again);
5. completes it and notes the verdict.

A `RecordingError` (a reader's, or a local check's) fails that recording alone: it is
noted in the journal and the summary, and the batch goes on. So does a 4xx the platform
answers about that recording (a duplicate file, a frame rate other than the order's). The
batch stops (`ImportStopped`) when going on cannot help: the job is not found or not active,
the key is refused, or the platform stays unreachable after the client's retries; the
journal keeps what was done, and the next run resumes there.
"""

from __future__ import annotations

import importlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from fleet_agent import uploads
from fleet_agent.calibration import same_calibration
from fleet_agent.client import ApiClient, ApiError, TransientError
from fleet_agent.importers.base import Recording, RecordingError, read_recordings
from fleet_agent.importers.journal import COMPLETED, Journal, idempotency_key
from fleet_agent.importers.mapping import CAMERA_PREFIX, ImportMapping, MappingError

OPERATOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
PARQUET = "parquet"
LOCAL_CHECKS = "fleet_agent.importers.local_checks"  # optional (the readers' helper's)
WORKING = ("assigned", "in_progress")
STORAGE_REFUSED = (400, 403, 404)  # an expired URL, a key or multipart upload renewed away
Progress = Callable[[str, dict], None]  # (event, info): "begin", "sent", "done"
log = logging.getLogger("fleet_agent")


class ImportStopped(RuntimeError):
    """The batch cannot go on (job, key or platform); the journal keeps what was done."""


@dataclass
class Outcome:
    """What happened to one recording in this run."""

    source_id: str
    status: str  # imported, resumed, skipped, failed, waiting
    episode_id: str | None = None
    verdict: str | None = None  # accepted, rejected, uploaded (QA pending)
    reasons: list = field(default_factory=list)
    message: str = ""
    bytes_sent: int = 0

    def line(self) -> str:
        text = f"{self.status:<8} {self.source_id}"
        if self.episode_id:
            text += f" -> episode {self.episode_id}"
        if self.verdict == "uploaded":
            text += " (uploaded, awaiting QA)"
        elif self.verdict:
            text += f" ({self.verdict}{': ' + ', '.join(self.reasons) if self.reasons else ''})"
        if self.message:
            text += f": {self.message}"
        return text


@dataclass
class ImportSummary:
    outcomes: list[Outcome] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the source's, not one recording's
    elapsed_seconds: float = 0.0

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def bytes_sent(self) -> int:
        return sum(o.bytes_sent for o in self.outcomes)

    def verdicts(self) -> dict[str, int]:
        counted: dict[str, int] = {}
        for outcome in self.outcomes:
            if outcome.verdict and outcome.status in ("imported", "resumed"):
                counted[outcome.verdict] = counted.get(outcome.verdict, 0) + 1
        return counted

    def as_dict(self) -> dict:
        return {
            **{s: self.count(s) for s in ("imported", "resumed", "skipped", "failed", "waiting")},
            "verdicts": self.verdicts(),
            "bytes_sent": self.bytes_sent,
            "failures": {o.source_id: o.message for o in self.outcomes if o.status == "failed"},
            "errors": list(self.errors),
            "elapsed_seconds": round(self.elapsed_seconds, 2),
        }

    def line(self) -> str:
        parts = [f"{self.count(s)} {s}" for s in ("imported", "resumed", "skipped", "failed")]
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(self.verdicts().items()))
        mib = self.bytes_sent / 2**20
        text = f"{', '.join(parts)}; {mib:.1f} MiB in {self.elapsed_seconds:.1f} s"
        return text + (f"; QA: {verdicts}" if verdicts else "")


@dataclass(frozen=True)
class Target:
    """The job the mapping names, as the platform shows it, the robot recording it, the
    catalog's entry for its embodiment (None if the catalog no longer lists it), and the
    id of each calibration the mapping names (a file's once registered)."""

    job: dict
    robot_id: str
    embodiment: dict | None = None
    calibration_ids: dict = field(default_factory=dict)  # CalibrationRef -> id

    @property
    def job_id(self) -> str:
        return self.job["id"]

    @property
    def camera_keys(self) -> list[str]:
        return [camera["key"] for camera in uploads.cameras_of(self.job)]


def resolve_target(client: ApiClient, mapping: ImportMapping) -> Target:
    job = next((j for j in client.jobs() if j["id"] == mapping.job), None)
    if job is None:
        raise ImportStopped(f"job {mapping.job} not found among your fleets' jobs")
    if job["status"] not in WORKING:
        raise ImportStopped(f"job {mapping.job} is {job['status']}: it takes no episodes")
    robots = sorted(
        (
            r
            for r in client.robots()
            if r["site"] == job["site"]
            and r.get("active", True)
            and r["embodiment"] == job["embodiment"]
        ),
        key=lambda r: (r["name"], r["id"]),
    )
    if mapping.robot:
        robots = [r for r in robots if mapping.robot in (r["name"], r["id"])]
    if not robots:
        wanted = f"robot {mapping.robot!r}" if mapping.robot else "an active robot"
        raise ImportStopped(
            f"job {mapping.job}: no {wanted} of embodiment {job['embodiment']} at its site"
        )
    embodiment = client.embodiments().get(job["embodiment"])
    if embodiment is None:
        log.warning("job %s: embodiment %s is not in the catalog", job["id"], job["embodiment"])
    robot_id = robots[0]["id"]
    check_scenes(client, mapping, job)
    calibration_ids = resolve_calibrations(client, mapping, job, robot_id)
    return Target(
        job=job, robot_id=robot_id, embodiment=embodiment, calibration_ids=calibration_ids
    )


def camera_names(job: dict) -> list[str]:
    """The job's cameras by name (`wrist` for observation.images.wrist)."""
    return [
        camera.get("name") or camera["key"].removeprefix(CAMERA_PREFIX)
        for camera in uploads.cameras_of(job)
    ]


def check_scenes(client: ApiClient, mapping: ImportMapping, job: dict) -> None:
    """Every scene the mapping names is an active scene of the job's site (MappingError)."""
    wanted = {mapping.scene} | {
        r.values["scene"] for r in mapping.recordings if "scene" in r.values
    }
    wanted.discard(None)
    if not wanted:
        return
    try:
        scenes = client.scenes(job["site"])
    except ApiError as exc:
        if exc.status != 404:
            raise
        raise MappingError("scene: this platform has no scenes (GET fleet/scenes: 404)") from None
    known = sorted(s["name"] for s in scenes if s.get("active", True))
    unknown = sorted(wanted - set(known))
    if unknown:
        raise MappingError(
            f"scene {unknown[0]!r} is not an active scene of the job's site"
            f" (its scenes: {', '.join(known) or 'none registered'})"
        )


def resolve_calibrations(client: ApiClient, mapping: ImportMapping, job: dict, robot_id: str):
    """The id of each calibration the mapping names: an id is checked to be the robot's for
    that camera; a file is registered for the robot unless the robot has it already (the
    same values), so a re-run registers nothing twice. MappingError on a camera the job does
    not record or a calibration of another robot or camera."""
    refs = mapping.calibration_refs()
    cameras = camera_names(job)
    ids = {}
    for camera, ref in refs:
        if camera not in cameras:
            raise MappingError(
                f"calibrations.{camera}: the job records no camera {camera!r}"
                f" (its cameras: {', '.join(cameras) or 'none'})"
            )
        if ref.id is not None:
            try:
                found = client.calibration(ref.id)
            except ApiError as exc:
                if exc.status != 404:
                    raise
                raise MappingError(f"calibrations.{camera}: no calibration {ref.id}") from None
            if found.get("robot") != robot_id or found.get("camera") != camera:
                raise MappingError(
                    f"calibrations.{camera}: calibration {ref.id} is of camera"
                    f" {found.get('camera')!r} of robot {found.get('robot')}, not of camera"
                    f" {camera!r} of the recording robot {robot_id}"
                )
            ids[ref] = ref.id
            continue
        body = {k: v for k, v in ref.body.items() if k != "camera"}
        existing = client.calibrations(robot=robot_id, camera=camera)
        same = next((c for c in existing if same_calibration(c, body)), None)
        if same is None:
            same = client.create_calibration({"robot": robot_id, "camera": camera, **body})
            log.info("registered %s for camera %s: %s", ref.describe(), camera, same["id"])
        ids[ref] = same["id"]
    return ids


# Readers that encode camera frames: unless the mapping says, they encode (or keep) the codec
# the order is delivered in, so the delivery copies the packets instead of re-encoding.
ENCODING_FORMATS = ("lerobot", "aloha-hdf5", "mcap")


def in_delivered_codec(mapping: ImportMapping, job: dict) -> ImportMapping:
    codec = (job.get("stream_spec") or {}).get("video_codec")
    if mapping.format not in ENCODING_FORMATS or "video_codec" in mapping.source:
        return mapping
    if codec not in uploads.ENCODERS:
        return mapping
    return replace(mapping, source={**mapping.source, "video_codec": codec})


def import_recordings(
    client: ApiClient,
    mapping: ImportMapping,
    source: Path | str,
    journal: Journal,
    progress: Progress | None = None,
    *,
    target: Target | None = None,
    ready: Callable[[Recording | RecordingError], bool] | None = None,
) -> ImportSummary:
    """Import every recording of `source` not yet completed (see the module docstring).
    `ready`: the watch mode's test; a recording it refuses is left for a later pass
    (`waiting`, nothing journaled)."""
    started = time.monotonic()
    target = target or resolve_target(client, mapping)
    summary = ImportSummary()
    notify = progress or (lambda event, info: None)

    def skip(source_id: str) -> bool:
        done = journal.is_completed(source_id)
        if done:
            summary.outcomes.append(Outcome(source_id, "skipped"))
        return done

    try:
        mapping = in_delivered_codec(mapping, target.job)
        for item in read_recordings(Path(source), mapping, skip=skip):
            if ready is not None and not ready(item):
                sid = item.source_id if isinstance(item, Recording) else item.source_id or "?"
                summary.outcomes.append(Outcome(sid, "waiting"))
                continue
            outcome = _import_one(client, mapping, target, journal, item, notify)
            summary.outcomes.append(outcome)
            notify("done", {"outcome": outcome})
    except RecordingError as exc:  # the reader gave up on the whole source
        summary.errors.append(str(exc))
    finally:
        summary.elapsed_seconds = time.monotonic() - started
    _refresh_verdicts(client, target, journal, summary)
    return summary


def _import_one(client, mapping, target, journal, item, notify) -> Outcome:
    if isinstance(item, RecordingError):
        source_id = item.source_id or "?"
        journal.failed(source_id, str(item))
        return Outcome(source_id, "failed", message=str(item))
    try:
        return _upload(client, mapping, target, journal, item, notify)
    except RecordingError as exc:
        journal.failed(item.source_id, str(exc))
        return Outcome(item.source_id, "failed", message=str(exc))
    except ApiError as exc:
        if exc.status == 401 or exc.code in ("job_not_active", "not_found", "permission_denied"):
            raise ImportStopped(f"{item.source_id}: {exc}") from exc
        journal.failed(item.source_id, str(exc))
        entry = journal.get(item.source_id)
        episode_id = entry.episode_id if entry else None
        return Outcome(item.source_id, "failed", episode_id=episode_id, message=str(exc))
    except TransientError as exc:
        raise ImportStopped(f"{item.source_id}: the platform cannot be reached ({exc})") from exc


def registration_body(mapping: ImportMapping, target: Target, recording: Recording) -> dict:
    """What registers the recording; the same recording always gives the same body (the
    Idempotency-Key's replay needs it)."""
    episode = recording.episode
    operator = mapping.overrides(recording.source_id).get("operator")
    operator = operator or recording.operator or mapping.operator
    if not operator:
        raise RecordingError("no operator: set operator in the mapping (or the recording's)")
    if not OPERATOR.match(operator):
        raise RecordingError(f"operator {operator!r}: 1-64 letters, digits, '.', '_' or '-'")
    rules = mapping.overrides(recording.source_id)
    task = rules.get("task_instruction") or recording.task_instruction or mapping.task_instruction
    task = task or target.job.get("task_type", "").replace("-", " ")
    success = _first(rules.get("success"), recording.success, mapping.success)
    scene = _first(rules.get("scene"), recording.scene, mapping.scene)
    objects = _first(rules.get("objects"), recording.objects, mapping.objects) or ()
    calibrations = {
        camera: target.calibration_ids[ref] for camera, ref in mapping.calibrations.items()
    }
    calibrations |= recording.calibrations
    calibrations |= {
        camera: target.calibration_ids[ref] for camera, ref in rules.get("calibrations", {}).items()
    }
    plan = {"scene": scene} if scene else {}
    if calibrations:
        plan["camera_calibrations"] = dict(sorted(calibrations.items()))
    return {
        "site": target.job["site"],
        "robot": target.robot_id,
        "operator": operator,
        "task_instruction": task,
        "success": True if success is None else success,
        "fps": episode.fps,
        "size_bytes": episode.size_bytes,
        "sha256": episode.sha256,
        "frames": episode.frames,
        "objects_handled": list(objects),
        **plan,
        "videos": uploads.declarations(videos_of(target, recording)),
    }


def _first(*values):
    """The first value that is set (not None): a rule's, the recording's, the default."""
    return next((value for value in values if value is not None), None)


def videos_of(target: Target, recording: Recording) -> dict[str, bytes]:
    """The recording's video of each camera the job records (others are not sent)."""
    missing = [key for key in target.camera_keys if key not in recording.episode.videos]
    if missing:
        raise RecordingError(
            f"no video for camera {', '.join(missing)} (the job records "
            f"{', '.join(target.camera_keys)})"
        )
    return {key: recording.episode.videos[key] for key in target.camera_keys}


def local_problems(recording: Recording, job: dict, embodiment: dict | None) -> list[str]:
    """The shared QA rules run here (`local_checks.check_recording`, with the embodiment's
    catalog entry: joint limits and thresholds), if that module exists.
    It may raise `RecordingError` or return the problems (strings, dicts or objects with
    `code` and `message`); [] when it is absent or finds nothing."""
    try:
        local_checks = importlib.import_module(LOCAL_CHECKS)
    except ModuleNotFoundError as exc:
        if exc.name != LOCAL_CHECKS:  # the module is there but needs something missing
            raise
        return []
    problems = local_checks.check_recording(recording, job, embodiment) or []
    return [_problem_text(problem) for problem in problems]


def _problem_text(problem) -> str:
    if isinstance(problem, str):
        return problem
    if isinstance(problem, dict):
        code, message = problem.get("code", ""), problem.get("message", "")
    else:
        code, message = getattr(problem, "code", ""), getattr(problem, "message", str(problem))
    return f"{code}: {message}" if code and message else str(code or message)


def _upload(client, mapping, target, journal, recording, notify) -> Outcome:
    source_id, episode = recording.source_id, recording.episode
    body = registration_body(mapping, target, recording)
    videos = videos_of(target, recording)
    problems = local_problems(recording, target.job, target.embodiment)
    if problems:
        raise RecordingError("local QA: " + "; ".join(problems))
    declared = {"sha256": episode.sha256, "videos": body["videos"]}
    entry = journal.get(source_id)
    resumed = entry is not None and entry.episode_id is not None
    if resumed and entry.declared != declared:
        raise RecordingError(
            f"changed since it was registered as episode {entry.episode_id}: its files differ"
            " from those declared then"
        )
    if not resumed:
        key = idempotency_key(target.job_id, source_id, episode.sha256)
        registered, replayed = uploads.register(
            client, target.job_id, body, episode.data, key, replayed=True
        )
        upload = registered.pop("upload")
        journal.registered(
            source_id,
            sha256=episode.sha256,
            key=key,
            episode_id=registered["id"],
            declared=declared,
            upload=upload,
        )
        resumed = replayed
    entry = journal.get(source_id)
    status = "resumed" if resumed else "imported"
    if resumed:  # the platform may have it completed already (a crash after `complete`)
        current = client.episode(entry.episode_id)
        if current["status"] != "registered":
            return _completed(journal, source_id, status, current, sent=0)
    files = [(PARQUET, episode.data), *sorted(videos.items())]
    notify("begin", {"source_id": source_id, "bytes": sum(len(d) for _, d in files)})
    sent, completed = _send_and_complete(client, journal, entry, files, notify)
    return _completed(journal, source_id, status, completed, sent=sent)


def _completed(journal, source_id, status, episode: dict, *, sent: int) -> Outcome:
    reasons = [failure.get("code", "") for failure in episode.get("qa_failures") or []]
    journal.completed(source_id, verdict=episode["status"], reasons=reasons)
    return Outcome(
        source_id,
        status,
        episode_id=episode["id"],
        verdict=episode["status"],
        reasons=reasons,
        bytes_sent=sent,
    )


def _send_and_complete(client, journal, entry, files, notify) -> tuple[int, dict]:
    """PUT what is not sent yet, then `complete`; once storage refuses a URL (or the platform
    says a file is missing: its key was renewed by a run that crashed before noting it),
    renew every URL and send everything again."""
    upload, total = entry.upload, 0
    for attempt in range(2):
        try:
            sent, parts = _send_files(client, journal, entry.source_id, upload, files, notify)
            total += sent
            video_parts = [{"camera_key": k, "parts": p} for k, p in parts.items() if k != PARQUET]
            episode = client.complete_episode(entry.episode_id, parts.get(PARQUET), video_parts)
            return total, episode
        except ApiError as exc:
            storage_refused = exc.code == "http_error" and exc.status in STORAGE_REFUSED
            if attempt or not (storage_refused or exc.code == "episode_files_missing"):
                raise
            upload = client.renew_upload(entry.episode_id)
            journal.renewed(entry.source_id, upload)
    raise AssertionError("unreachable")


def _send_files(client, journal, source_id, upload, files, notify) -> tuple[int, dict]:
    """PUT each file (or part) the journal has not seen go up to these instructions; the
    bytes sent and each multipart file's parts {file: [{part_number, etag}]}."""
    done = journal.sent(source_id)
    instructions = {PARQUET: upload, **{v["camera_key"]: v for v in upload.get("videos") or []}}
    sent, parts = 0, {}
    for name, data in files:
        file = instructions[name]
        if file["method"] == "single":
            if (name, 0) not in done:
                response = client.put_bytes(file["url"], data, file["headers"])
                journal.mark_sent(source_id, name, 0, response.headers.get("etag", ""))
                sent += len(data)
            notify("sent", {"bytes": len(data)})
            continue
        size, parts[name] = int(file["part_size"]), []
        for part in file["parts"]:
            number = int(part["part_number"])
            chunk = data[(number - 1) * size : number * size]
            etag = done.get((name, number))
            if etag is None:
                response = client.put_bytes(part["url"], chunk, part["headers"])
                etag = response.headers.get("etag")
                if not etag:
                    raise ApiError(response.status, "no_etag", f"{name} part {number}: no ETag")
                journal.mark_sent(source_id, name, number, etag)
                sent += len(chunk)
            parts[name].append({"part_number": number, "etag": etag})
            notify("sent", {"bytes": len(chunk)})
    return sent, parts


def _refresh_verdicts(client, target, journal, summary) -> None:
    """QA may decide after `complete` answered: read the job's episodes once and note the
    verdicts of this run's recordings (and of earlier ones still undecided)."""
    undecided = [e for e in journal.entries() if e.state == COMPLETED and e.verdict == "uploaded"]
    if not undecided:
        return
    try:
        current = {e["id"]: e for e in client.episodes(target.job_id)}
    except (ApiError, TransientError) as exc:
        summary.errors.append(f"verdicts not read: {exc}")
        return
    by_episode = {o.episode_id: o for o in summary.outcomes if o.episode_id}
    for entry in undecided:
        episode = current.get(entry.episode_id)
        if episode is None or episode["status"] == "uploaded":
            continue
        reasons = [failure.get("code", "") for failure in episode.get("qa_failures") or []]
        journal.completed(entry.source_id, verdict=episode["status"], reasons=reasons)
        if entry.episode_id in by_episode:
            by_episode[entry.episode_id].verdict = episode["status"]
            by_episode[entry.episode_id].reasons = reasons
