"""QA of one file in a child process with a memory ceiling and a deadline.

The footer checks in qa_checks refuse what a file declares beyond QALimits, but a parquet
decoder can still be made to allocate far more than the file's size (pages that lie about
their contents, run-length bombs). So the checks run in a forked child that is killed the
moment its own resident memory (anonymous pages: not code or libraries; a video decoder's
frames too) passes EPISODE_QA_MEMORY_BYTES beyond what it shares with us at fork (watched every
10 ms near the ceiling, less often far below it: `_Watch`; an address-space limit is the
backstop against one huge allocation between two looks), or at the deadline. The QA worker
itself never grows: a child that runs out of memory or time gives a verdict
(`qa_memory_limit`, `qa_time_limit`), and the worker goes on with the next episode. A child
that dies of anything else (a decoder crash) is a verdict too; storage errors in the child
come back as StorageUnavailable, so the task retries them like any other.

`os.fork` (not multiprocessing): Celery's prefork pool children are daemonic, and
multiprocessing refuses children of daemonic processes. The child touches no database and
makes its own storage connections; it leaves with `os._exit`, running no cleanup of its
parent's.
"""

import faulthandler
import hashlib
import os
import pickle
import resource
import select
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from datasets import storage
from datasets.qa_checks import EpisodeExpectation, QALimits, QAResult, Reason, check_stored_episode
from datasets.qa_video_checks import (
    VideoExpectation,
    VideoLimits,
    check_camera_lengths,
    check_video_file,
    with_decode_budget,
)

MEMORY_EXIT = 3  # the child ran out of its memory budget
ADDRESS_SPACE_FACTOR = 16
# A QAResult is a few KB plus the trajectory's near-duplicate signature (datasets/
# qa_duplicates.py: 10 samples a second x D float32 and its keys: 1.5 MB for an hour at D = 8,
# ~4 MB at D = 23); more is refused
RESULT_LIMIT_BYTES = 32 * 1024 * 1024


class SandboxError(RuntimeError):
    """The checks raised an unexpected error in the child (reported, never a verdict)."""


@dataclass(frozen=True)
class ChildOutcome:
    result: QAResult
    peak_rss_bytes: int  # the child's, from wait4's rusage
    seconds: float


def qa_limits() -> QALimits:
    return QALimits(
        max_footer_bytes=settings.EPISODE_QA_MAX_FOOTER_BYTES,
        max_row_groups=settings.EPISODE_QA_MAX_ROW_GROUPS,
        max_columns=settings.EPISODE_QA_MAX_COLUMNS,
        max_decoded_bytes=settings.EPISODE_QA_MAX_DECODED_BYTES,
        batch_rows=settings.EPISODE_QA_BATCH_ROWS,
        seconds=settings.EPISODE_QA_TIME_LIMIT_SECONDS,
    )


@dataclass(frozen=True)
class StoredVideo:
    """One camera's video as QA reads it: where it is stored and what the fleet declared."""

    camera_key: str
    key: str  # "" when no file arrived for the camera
    size: int = 0
    sha256: str = ""
    min_width: int = 0
    min_height: int = 0


def video_limits(deadline: float | None = None) -> VideoLimits:
    return VideoLimits(
        max_still_seconds=settings.EPISODE_QA_VIDEO_MAX_STILL_SECONDS,
        black_luma=settings.EPISODE_QA_VIDEO_BLACK_LUMA,
        dark_luma=settings.EPISODE_QA_VIDEO_DARK_LUMA,
        bright_luma=settings.EPISODE_QA_VIDEO_BRIGHT_LUMA,
        frozen_difference=settings.EPISODE_QA_VIDEO_FROZEN_DIFFERENCE,
        max_width=settings.EPISODE_QA_VIDEO_MAX_WIDTH,
        max_height=settings.EPISODE_QA_VIDEO_MAX_HEIGHT,
        cpu_seconds_base=settings.EPISODE_QA_VIDEO_CPU_SECONDS_BASE,
        cpu_seconds_per_second=settings.EPISODE_QA_VIDEO_CPU_SECONDS_PER_SECOND,
        deadline=deadline,
        fingerprint=settings.EPISODE_QA_VIDEO_DUPLICATES,
    )


def check_stored_episode_bounded(
    key: str,
    expected: EpisodeExpectation,
    videos: tuple[StoredVideo, ...] = (),
    *,
    uploaded_key: str = "",
) -> QAResult:
    """check_stored_episode, then each camera's video, within QALimits (one deadline for all
    the episode's files), in the sandbox unless EPISODE_QA_SANDBOX is off."""
    limits = qa_limits()
    still = video_limits()

    def check() -> QAResult:
        deadline = time.monotonic() + limits.seconds
        result = check_stored_episode(key, expected, limits, uploaded_key=uploaded_key)
        if result.passed and videos:
            check_stored_videos(
                videos,
                fps=expected.fps,
                frames=result.frames,
                result=result,
                limits=VideoLimits(**{**still.__dict__, "deadline": deadline}),
            )
        return result

    if not settings.EPISODE_QA_SANDBOX:
        return check()
    return run_in_sandbox(
        check,
        memory_bytes=settings.EPISODE_QA_MEMORY_BYTES,
        seconds=limits.seconds + 5,  # the checks stop themselves first; this is the backstop
    ).result


def check_stored_videos(
    videos: tuple[StoredVideo, ...], *, fps: int, frames: int, result: QAResult, limits
) -> None:
    """Each video fetched to a temporary file (size and SHA-256 verified on the way), then
    the fetched ones checked there (check_video_files)."""
    with tempfile.TemporaryDirectory(prefix="qa-videos-") as folder:
        fetched = []
        for number, video in enumerate(videos):
            path = Path(folder) / f"{number}.mp4"
            with path.open("wb") as handle:
                if _fetched(video, handle, result):
                    fetched.append((video, path))
        check_video_files(fetched, fps=fps, frames=frames, result=result, limits=limits)


def check_video_files(
    videos: list[tuple[StoredVideo, Path]], *, fps: int, frames: int, result: QAResult, limits
) -> None:
    """The cameras' local files (datasets/qa_video_checks.py), within one CPU budget for
    decoding the episode's videos; then the cameras' lengths against each other."""
    limits = with_decode_budget(limits, frames=frames, fps=fps)
    measures = {}
    for video, path in videos:
        expected = VideoExpectation(
            camera_key=video.camera_key,
            fps=fps,
            frames=frames,
            min_width=video.min_width,
            min_height=video.min_height,
        )
        measures[video.camera_key] = check_video_file(path, expected, result, limits)
    check_camera_lengths(measures, result)
    result.videos = {camera: measure.as_json() for camera, measure in measures.items()}


def _fetched(video: StoredVideo, handle, result: QAResult) -> bool:
    camera = video.camera_key
    try:
        size = storage.head(video.key).size if video.key else None
    except storage.ObjectMissing:
        size = None
    if size is None:
        result.fail(Reason.VIDEO_MISSING, f"{camera}: no video was uploaded for this camera.")
        return False
    if size != video.size:
        result.fail(
            Reason.SIZE_MISMATCH, f"{camera}: the video has {size} bytes; {video.size} declared."
        )
        return False
    digest = hashlib.sha256()
    for block in storage.stream(video.key):
        digest.update(block)
        handle.write(block)
    handle.flush()
    result.checksum_bytes_read += size
    if digest.hexdigest() != video.sha256:
        result.fail(
            Reason.CHECKSUM_MISMATCH,
            f"{camera}: the video's SHA-256 differs from the declared one.",
        )
        return False
    return True


def run_in_sandbox(check, *, memory_bytes: int, seconds: float) -> ChildOutcome:
    """Run check() -> QAResult in a forked child allowed `memory_bytes` of resident memory
    beyond what it shares with us at fork, for `seconds`; limits and crashes come back as
    failed results."""
    started = time.monotonic()
    baseline = _resident_bytes(os.getpid())
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        _child(check, write_end, memory_bytes)  # never returns
    os.close(write_end)
    watch = _Watch(pid=pid, ceiling=baseline + memory_bytes, deadline=started + seconds)
    payload = watch.read(read_end)
    os.close(read_end)
    if watch.stopped:
        os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    peak = usage.ru_maxrss * 1024  # KiB on Linux
    elapsed = time.monotonic() - started
    if watch.stopped == "memory":
        payload = pickle.dumps(("memory", None))
    result = _verdict(
        payload, status, timed_out=watch.stopped == "time", memory_bytes=memory_bytes, secs=seconds
    )
    return ChildOutcome(result=result, peak_rss_bytes=peak, seconds=elapsed)


class _Watch:
    """Reads the child's answer while watching its own resident memory and the clock: the
    child is stopped ("memory", "time") the moment it passes either.

    The memory is looked at again after the time the child would need to reach the ceiling at
    GROWTH_BYTES_PER_SECOND (between MIN_POLL and MAX_POLL seconds): near the ceiling every
    10 ms as before, far below it (a QA check uses ~100 MB of 1 GiB) every ~90 ms, so that
    watching costs the worker a tenth of the wake-ups (each ~150 us of CPU on a busy machine,
    ~3 % of an episode's QA) without letting a child grow further past the ceiling unseen."""

    MIN_POLL, MAX_POLL = 0.01, 0.1
    GROWTH_BYTES_PER_SECOND = 10 * 1024**3  # faster than a process can fault in new pages

    def __init__(self, *, pid: int, ceiling: int, deadline: float):
        self.pid, self.ceiling, self.deadline = pid, ceiling, deadline
        self.stopped = ""

    def read(self, fd: int) -> bytes:
        chunks, size = [], 0
        with _OwnMemory(self.pid) as memory:
            while True:
                if time.monotonic() >= self.deadline:
                    self.stopped = "time"
                    return b""
                headroom = self.ceiling - memory.bytes()
                if headroom < 0:
                    self.stopped = "memory"
                    return b""
                wait = min(
                    max(headroom / self.GROWTH_BYTES_PER_SECOND, self.MIN_POLL), self.MAX_POLL
                )
                ready, _, _ = select.select([fd], [], [], wait)
                if not ready:
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > RESULT_LIMIT_BYTES:
                    return b""
                chunks.append(chunk)


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


class _OwnMemory:
    """Resident memory of a process that is its own (anonymous: the heap, FFmpeg's frames), not
    file pages (code, libraries): a forked child shares its parent's anonymous pages at once
    but maps the file pages back only as it runs, so its whole resident size starts far below
    its parent's (70 against 114 MB here) and a ceiling on that let a decoder's frames grow
    unseen into the difference. /proc/PID/statm is opened once and read again in place."""

    def __init__(self, pid: int):
        try:
            self.fd = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
        except (FileNotFoundError, ProcessLookupError):
            self.fd = -1  # gone already: nothing to watch

    def bytes(self) -> int:
        try:
            fields = os.pread(self.fd, 256, 0).split()
            return (int(fields[1]) - int(fields[2])) * PAGE_BYTES  # resident - shared (file)
        except (OSError, IndexError, ValueError):
            return 0

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if self.fd >= 0:
            os.close(self.fd)


def _resident_bytes(pid: int) -> int:
    with _OwnMemory(pid) as memory:
        return memory.bytes()


def _child(check, write_end: int, memory_bytes: int) -> None:
    code = 0
    try:
        faulthandler.disable()  # a crash is reported as a verdict, not as a traceback
        for name in ("SIGTERM", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGHUP"):
            signal.signal(getattr(signal, name), signal.SIG_DFL)  # not the worker's handlers
        # A backstop for one enormous allocation between two looks of the watch (address
        # space, not memory: allocators reserve far more than they use, so it is generous).
        ceiling = _address_space_bytes() + ADDRESS_SPACE_FACTOR * memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))
        storage.reset_connections()  # the parent's sockets are not ours to use
        try:
            payload = ("result", check())
        except MemoryError:
            payload, code = ("memory", None), MEMORY_EXIT
        except storage.StorageError as exc:
            payload = ("storage", str(exc)[:2000])
        except Exception as exc:  # a checker bug: reported, never a crash of the worker
            payload = ("error", f"{type(exc).__name__}: {exc}"[:2000])
        data = pickle.dumps(payload)
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view) :]
    except MemoryError:
        code = MEMORY_EXIT
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _verdict(payload: bytes, status: int, *, timed_out: bool, memory_bytes: int, secs: float):
    result = QAResult()
    if timed_out:
        result.fail(Reason.QA_TIME_LIMIT, f"Checking the file took longer than {secs:g} s.")
        return result
    try:
        kind, value = pickle.loads(payload) if payload else ("crash", None)  # noqa: S301 (our child's)
    except (pickle.UnpicklingError, EOFError, ValueError):
        kind, value = "crash", None
    if kind == "result":
        return value
    if kind == "storage":
        raise storage.StorageUnavailable(value)
    if kind == "memory" or os.waitstatus_to_exitcode(status) == MEMORY_EXIT:
        result.fail(
            Reason.QA_MEMORY_LIMIT,
            f"Checking the file needed more than {memory_bytes // 2**20} MiB; it was stopped.",
        )
        return result
    if kind == "error":
        # Not a verdict on the file: the run stays unfinished (counted, retried, then given up).
        raise SandboxError(value)
    result.fail(
        Reason.QA_FAILED,
        f"The checker crashed on this file (exit status {os.waitstatus_to_exitcode(status)}).",
    )
    return result


def _address_space_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0
