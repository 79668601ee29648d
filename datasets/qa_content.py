"""Content QA: is the episode a usable demonstration, not only a well-formed file?

Pure numpy on the decoded `observation.state` and `action` arrays (frames x D) that
datasets/qa_checks.py reads; it runs only once the format checks passed (finite values, the
right vector length, frame_index and timestamps in order). Each check has a stable reason
code (datasets.qa_checks.Reason) and a threshold from the embodiment (its `state_limits`) or
from settings (EPISODE_QA_*, ContentThresholds below); the rules, in datasets/README.md:

- state_out_of_limits: every state element within the embodiment's [low, high] (+ tolerance).
- state_jump: no element moves more between two frames than max_speed / fps + jump_tolerance.
- idle_episode: a frame is idle when the state, smoothed over 0.2 s, moves slower than
  idle_speed (units/s, the fastest element over 0.5 s); an idle fraction over
  max_idle_fraction rejects. An idle head or tail longer than idle_edge_flag_seconds is a
  flag (measured, not a rejection).
- frozen_signal: a state element constant (peak-to-peak <= frozen_epsilon) for the whole
  episode: a dead sensor.
- action_state_mismatch: actions are joint targets, so action[t] must predict state[t+lag]
  for some lag in 0..max_action_lag_seconds. The rule: the best lag's median (over the
  elements that move) Pearson correlation of action[t] with state[t+lag] must reach
  min_action_correlation. Random or unrelated actions correlate near 0.
- near-duplicates (decided in datasets/services/qa.py, which has the database): two
  fingerprints of the state, smoothed over 0.2 s and sampled at FINGERPRINT_POINTS evenly
  spaced frames (first to last), z-scored per element and quantised on two grids offset by
  half a step (a value near one grid's edge is in the middle of the other's); an accepted
  episode with either fingerprint is a duplicate. (Samples, not segment means: the means of
  a long repetitive motion all tend to its average, so unrelated long episodes would match.)

The quality score in [0, 1] is the mean of activity (1 - idle fraction), action-state
consistency (the correlation, clipped to [0, 1]) and smoothness (1 / (1 + jerk / jerk_ref),
jerk the RMS third derivative of the smoothed state, units/s^3).
"""

import hashlib
from dataclasses import dataclass, field

import numpy as np

FINGERPRINT_POINTS = 16
FINGERPRINT_STEP = 0.5  # z-score units per quantisation step
SMOOTH_SECONDS = 0.2
MOTION_SECONDS = 0.5
JERK_STEP_SECONDS = 0.1
CORRELATION_PAIRS = 6_000  # frames the action-state correlation uses at most (std error ~0.013)
IDLE_STEP_SECONDS = 0.05  # idle is looked at 20 times a second
# Row chunks for the frame-by-frame passes: fresh n x D temporaries cost a page fault per 4 KiB
# (as much as the arithmetic on them); chunk-sized ones are reused from the heap, in cache.
CHUNK_ROWS = 4096


class ContentReason:
    STATE_OUT_OF_LIMITS = "state_out_of_limits"
    STATE_JUMP = "state_jump"
    IDLE_EPISODE = "idle_episode"
    FROZEN_SIGNAL = "frozen_signal"
    ACTION_STATE_MISMATCH = "action_state_mismatch"
    NEAR_DUPLICATE = "near_duplicate"


@dataclass(frozen=True)
class ContentThresholds:
    """The content checks' thresholds: the embodiment's limits, the rest from settings."""

    state_limits: tuple = ()  # ((low, high), ...) per state element; () = no limits
    state_names: tuple = ()
    limit_tolerance: float = 0.02  # units beyond a limit still accepted (sensor overshoot)
    max_speed: float = 6.0  # units/s between two frames
    jump_tolerance: float = 0.05  # units per frame on top of max_speed / fps (noise)
    idle_speed: float = 0.02  # units/s: slower than this is idle
    max_idle_fraction: float = 0.5
    idle_edge_flag_seconds: float = 2.0
    frozen_epsilon: float = 1e-6
    min_action_correlation: float = 0.5
    max_action_lag_seconds: float = 0.5
    jerk_reference: float = 10.0  # units/s^3 at which smoothness is 0.5

    def as_json(self) -> dict:
        return {
            "state_limits": [list(pair) for pair in self.state_limits],
            "limit_tolerance": self.limit_tolerance,
            "max_speed": self.max_speed,
            "jump_tolerance": self.jump_tolerance,
            "idle_speed": self.idle_speed,
            "max_idle_fraction": self.max_idle_fraction,
            "idle_edge_flag_seconds": self.idle_edge_flag_seconds,
            "frozen_epsilon": self.frozen_epsilon,
            "min_action_correlation": self.min_action_correlation,
            "max_action_lag_seconds": self.max_action_lag_seconds,
            "jerk_reference": self.jerk_reference,
        }


@dataclass
class ContentReport:
    failures: list = field(default_factory=list)  # [(code, message)]
    measurements: dict = field(default_factory=dict)
    quality_score: float | None = None
    fingerprints: tuple = ("", "")


def check_content(
    state: np.ndarray, action: np.ndarray, *, fps: int, thresholds: ContentThresholds
) -> ContentReport:
    """All content checks on finite (frames, D) arrays; failures are (code, message)."""
    report = ContentReport()
    # float32 (as uploaded) is read as it is: every pass converts what it reads to float64
    # (a chunk, a sampled row, the prefix sums), so no full float64 copy is made
    state = np.asarray(state)
    if state.dtype != np.float32:
        state = np.asarray(state, dtype=np.float64)
    action = np.asarray(action)  # only its sampled rows are read (and converted)
    names = _names(thresholds, state.shape[1])
    # shared: limits, frozen, moving elements
    extremes = _column_min(state).astype(np.float64), _column_max(state).astype(np.float64)
    _check_limits(state, extremes, thresholds, names, report)
    _check_jumps(state, fps, thresholds, names, report)
    ptp = extremes[1] - extremes[0]
    _check_frozen(ptp, thresholds, names, report)
    smooth = _Smoothed(state, max(1, round(SMOOTH_SECONDS * fps)))  # shared by the next three
    mean = smooth.total / len(state)
    # E[x^2] - mean^2: exact enough for a normaliser (an element whose spread is lost to
    # rounding moves less than any threshold), without an n x D centred copy
    spread = np.sqrt(np.maximum(_squares(state) / len(state) - mean * mean, 0.0))
    idle = _measure_idle(smooth, fps, thresholds, report)
    correlation = _check_action_state(state, action, ptp, fps, thresholds, report)
    jerk = _jerk(smooth, fps)
    report.measurements["jerk"] = round(jerk, 4)
    report.quality_score = quality_score(
        idle_fraction=idle, correlation=correlation, jerk=jerk, thresholds=thresholds
    )
    report.fingerprints = fingerprints(state, fps, smooth=smooth, spread=spread)
    return report


def quality_score(*, idle_fraction, correlation, jerk, thresholds: ContentThresholds) -> float:
    parts = [1.0 - idle_fraction, 1.0 / (1.0 + jerk / thresholds.jerk_reference)]
    if correlation is not None:
        parts.append(min(1.0, max(0.0, correlation)))
    return round(float(np.mean(parts)), 4)


def _names(thresholds: ContentThresholds, dim: int) -> list[str]:
    if len(thresholds.state_names) == dim:
        return list(thresholds.state_names)
    return [f"state[{index}]" for index in range(dim)]


def _check_limits(state, extremes, thresholds, names, report) -> None:
    limits = np.asarray(thresholds.state_limits, dtype=np.float64).reshape(-1, 2)
    if len(limits) != state.shape[1]:
        return  # no limits declared (or not one pair per element): nothing to check
    tolerance = thresholds.limit_tolerance
    lowest, highest = extremes
    if (lowest >= limits[:, 0] - tolerance).all() and (highest <= limits[:, 1] + tolerance).all():
        report.measurements["frames_out_of_limits"] = 0
        return
    below = state < limits[:, 0] - tolerance
    above = state > limits[:, 1] + tolerance
    outside = below | above
    report.measurements["frames_out_of_limits"] = int(outside.any(axis=1).sum())
    if outside.any():
        frame, element = np.argwhere(outside)[0]
        low, high = limits[element]
        report.failures.append(
            (
                ContentReason.STATE_OUT_OF_LIMITS,
                f"{names[element]} is {state[frame, element]:.4g} at frame {frame}, outside"
                f" the robot's limits [{low:g}, {high:g}] (tolerance {tolerance:g});"
                f" {report.measurements['frames_out_of_limits']} frames are outside.",
            )
        )


def _check_jumps(state, fps, thresholds, names, report) -> None:
    if len(state) < 2:
        return
    bound = thresholds.max_speed / fps + thresholds.jump_tolerance
    largest, frame, element = -1.0, 0, 0
    for start in range(0, len(state) - 1, CHUNK_ROWS):  # temporaries that stay in cache
        block = np.asarray(state[start : start + CHUNK_ROWS + 1], dtype=np.float64)
        steps = np.abs(block[1:] - block[:-1])
        at = int(np.argmax(steps))
        if steps.flat[at] > largest:  # the first largest step, as one argmax would find
            largest = float(steps.flat[at])
            frame, element = start + at // state.shape[1], at % state.shape[1]
    report.measurements["max_step"] = round(largest, 6)
    if largest > bound:
        report.failures.append(
            (
                ContentReason.STATE_JUMP,
                f"{names[element]} jumps {largest:.4g} between frames {frame} and {frame + 1};"
                f" at most {bound:.4g} per frame ({thresholds.max_speed:g}/s at {fps} fps"
                f" + {thresholds.jump_tolerance:g}).",
            )
        )


def _check_frozen(ptp, thresholds, names, report) -> None:
    frozen = np.flatnonzero(ptp <= thresholds.frozen_epsilon)
    report.measurements["frozen_elements"] = [names[index] for index in frozen]
    if frozen.size:
        report.failures.append(
            (
                ContentReason.FROZEN_SIGNAL,
                f"{', '.join(names[index] for index in frozen)} never change"
                " during the whole episode (a frozen or disconnected sensor).",
            )
        )


class _Smoothed:
    """The state's moving average over `window` frames, evaluated only where it is needed
    (from one prefix sum): smooth.at(indices), indices 0..len(smooth) - 1. The prefix sums
    are held element by frame (D x n + 1), so that numpy's loops run along the frames."""

    def __init__(self, state: np.ndarray, window: int):
        self.window = max(1, min(window, len(state) // 2))  # a short episode: shorter window
        self.sums = np.empty((state.shape[1], len(state) + 1))
        self.sums[:, 0] = 0
        self.sums[:, 1:] = state.T
        np.cumsum(self.sums, axis=1, out=self.sums)  # in place on one contiguous array
        self.length = len(state) - self.window + 1
        self.total = self.sums[:, -1]

    def at(self, indices) -> np.ndarray:
        """The smoothed state at `indices`, frames x D."""
        return ((self.sums[:, indices + self.window] - self.sums[:, indices]) / self.window).T

    def between(self, later: slice, earlier: slice) -> np.ndarray:
        """smooth[later] - smooth[earlier] for two slices of one length, D x frames."""
        w = self.window
        shifted = lambda part: slice(part.start + w, part.stop + w, part.step)  # noqa: E731
        sums = self.sums
        return (
            sums[:, shifted(later)] - sums[:, later] - sums[:, shifted(earlier)] + sums[:, earlier]
        ) / w


def _measure_idle(smooth: _Smoothed, fps, thresholds, report) -> float:
    """Idle where the fastest element's smoothed speed over MOTION_SECONDS is under
    idle_speed, looked at every IDLE_STEP_SECONDS."""
    span = max(1, min(round(MOTION_SECONDS * fps), smooth.length - 1))
    stride = max(1, round(IDLE_STEP_SECONDS * fps))
    stop = max(1, smooth.length - span)
    if smooth.length < 2:  # one frame: no motion to measure
        speed = np.zeros(1)
    else:
        moved = smooth.between(slice(span, stop + span, stride), slice(0, stop, stride))
        speed = np.abs(moved, out=moved).max(axis=0)
        speed *= fps / span
    idle = speed < thresholds.idle_speed
    fraction = float(idle.mean())
    head = (np.argmin(idle) if not idle.all() else idle.size) * stride / fps
    tail = (np.argmin(idle[::-1]) if not idle.all() else idle.size) * stride / fps
    flags = []
    if head > thresholds.idle_edge_flag_seconds:
        flags.append("idle_head")
    if tail > thresholds.idle_edge_flag_seconds:
        flags.append("idle_tail")
    report.measurements.update(
        idle_fraction=round(fraction, 4),
        idle_head_seconds=round(float(head), 3),
        idle_tail_seconds=round(float(tail), 3),
        flags=flags,
    )
    if fraction > thresholds.max_idle_fraction:
        report.failures.append(
            (
                ContentReason.IDLE_EPISODE,
                f"The robot is idle for {fraction:.0%} of the episode (moving slower than"
                f" {thresholds.idle_speed:g}/s); at most {thresholds.max_idle_fraction:.0%}.",
            )
        )
    return fraction


def _check_action_state(state, action, ptp, fps, thresholds, report) -> float | None:
    """Best lag's median correlation of action[t] with state[t + lag] over moving elements."""
    moving = np.flatnonzero(ptp >= thresholds.idle_speed)
    max_lag = min(round(thresholds.max_action_lag_seconds * fps), len(state) - 3)
    if moving.size == 0 or max_lag < 0:
        report.measurements.update(action_state_correlation=None, action_lag_frames=None)
        return None
    columns = moving if moving.size < state.shape[1] else slice(None)
    correlate = _LaggedCorrelation(action, state, columns)
    # Every other lag, then the neighbours of the best: correlation varies smoothly with the
    # lag for smooth motion, and random actions correlate at no lag.
    scores = {lag: correlate.median(lag) for lag in {*range(0, max_lag + 1, 2), max_lag}}
    coarse = max(scores, key=scores.get)
    for lag in (coarse - 1, coarse + 1):
        if 0 <= lag <= max_lag and lag not in scores:
            scores[lag] = correlate.median(lag)
    best_lag = max(sorted(scores), key=scores.get)
    best = scores[best_lag]
    report.measurements.update(
        action_state_correlation=round(best, 4), action_lag_frames=int(best_lag)
    )
    if best < thresholds.min_action_correlation:
        report.failures.append(
            (
                ContentReason.ACTION_STATE_MISMATCH,
                f"The actions do not predict the next states: their best correlation with the"
                f" state (lag 0 to {max_lag} frames) is {best:.2f};"
                f" at least {thresholds.min_action_correlation:g}.",
            )
        )
    return best


class _LaggedCorrelation:
    """The per-element Pearson correlation of action[t] with state[t + lag], over at most
    CORRELATION_PAIRS frames t evenly spread (every r-th frame of a long episode: plenty for a
    correlation). The window sums are totals less the few frames a lag leaves out, so each lag
    costs one dot product over the sampled frames. Arrays are held element by frame (D x n):
    numpy's loops then run along the frames, not along rows of D values."""

    def __init__(self, action, state, columns):
        self.stride = stride = max(1, -(-len(action) // CORRELATION_PAIRS))
        sampled = np.asarray(np.ascontiguousarray(action[::stride, columns].T), dtype=np.float64)
        # centred once: the sums lose no precision
        self.a = sampled - sampled.sum(axis=1, keepdims=True) / sampled.shape[1]
        self.a_totals = self.a.sum(axis=1), _row_squares(self.a)
        # state[lag::stride] is the (lag % stride)-th of these, from frame lag // stride on.
        # Not centred: the covariance below already subtracts the means, and with the action
        # centred the rounding left is ~1e-10 of the variance of any element moving enough
        # to be checked (a centring pass over strided rows would cost more than the rest).
        self.grids = [
            np.ascontiguousarray(state[offset::stride, columns].T, dtype=np.float64)
            for offset in range(stride)
        ]
        self.grid_totals = [(grid.sum(axis=1), _row_squares(grid)) for grid in self.grids]

    def median(self, lag: int) -> float:
        offset, skip = lag % self.stride, lag // self.stride
        grid, (s_total, s2_total) = self.grids[offset], self.grid_totals[offset]
        s = grid[:, skip:]
        m = s.shape[1]  # pairs (t, t + lag) for t = 0, r, 2r, ... while t + lag < n
        a, a_left = self.a[:, :m], self.a[:, m:]
        sum_a = self.a_totals[0] - a_left.sum(axis=1)
        sum_a2 = self.a_totals[1] - _row_squares(a_left)
        s_left = grid[:, :skip]
        sum_s, sum_s2 = s_total - s_left.sum(axis=1), s2_total - _row_squares(s_left)
        cross = np.einsum("ji,ji->j", a, s)
        covariance = cross - sum_a * sum_s / m
        variance = (sum_a2 - sum_a * sum_a / m) * (sum_s2 - sum_s * sum_s / m)
        with np.errstate(invalid="ignore", divide="ignore"):
            correlation = np.where(variance > 0, covariance / np.sqrt(np.maximum(variance, 0)), 0.0)
        return float(np.median(correlation))


def _row_squares(x: np.ndarray) -> np.ndarray:
    """Per row sum of squares of a D x n array."""
    return np.einsum("ji,ji->j", x, x)


def _squares(x: np.ndarray) -> np.ndarray:
    """Per column sum of squares, without an n x D temporary."""
    return _by_column(
        x, lambda rows: np.einsum("ij,ij->j", rows, rows, dtype=np.float64), np.add.reduce
    )


# A reduction down the columns of a tall, narrow array runs its inner loop over one short row
# at a time; over a (n / BLOCK, BLOCK * D) view of the same memory the inner loop is long, and
# the BLOCK partial results per column are reduced after: 5-15x faster at D = 8.
BLOCK_ROWS = 64


def _by_column(x: np.ndarray, reduce, combine) -> np.ndarray:
    """reduce(rows) -> one value per column, computed over row blocks; combine(parts, axis=0)
    folds the blocks' values (min, max, add)."""
    n, d = x.shape
    cut = n - n % BLOCK_ROWS
    if cut == 0 or not x.flags.c_contiguous:
        return reduce(x)
    parts = reduce(x[:cut].reshape(cut // BLOCK_ROWS, BLOCK_ROWS * d)).reshape(BLOCK_ROWS, d)
    if cut < n:
        parts = np.vstack([parts, reduce(x[cut:])])
    return combine(parts, axis=0)


def _column_min(x: np.ndarray) -> np.ndarray:
    return _by_column(x, lambda rows: rows.min(axis=0), np.minimum.reduce)


def _column_max(x: np.ndarray) -> np.ndarray:
    return _by_column(x, lambda rows: rows.max(axis=0), np.maximum.reduce)


def _jerk(smooth: _Smoothed, fps) -> float:
    """RMS third derivative of the smoothed state, sampled every JERK_STEP_SECONDS."""
    step = max(1, round(JERK_STEP_SECONDS * fps))
    w = smooth.window
    sums = smooth.sums
    sampled = (sums[:, w : smooth.length + w : step] - sums[:, 0 : smooth.length : step]) / w
    if sampled.shape[1] < 4:
        return 0.0
    third = np.diff(sampled, n=3, axis=1) / (step / fps) ** 3
    return float(np.sqrt(np.mean(third * third)))


def fingerprints(state: np.ndarray, fps: int, smooth=None, spread=None) -> tuple[str, str]:
    """Two hex fingerprints of the downsampled, normalised trajectory (see the module doc)."""
    if smooth is None or spread is None:
        state = np.asarray(state, dtype=np.float64)
    if smooth is None:
        smooth = _Smoothed(state, max(1, round(SMOOTH_SECONDS * fps)))
    if spread is None:
        spread = state.std(axis=0)
    points = np.linspace(0, smooth.length - 1, FINGERPRINT_POINTS).round().astype(int)
    mean = smooth.total / len(state)
    z = (smooth.at(points) - mean) / np.maximum(spread, 1e-3)
    out = []
    for offset in (0.0, 0.5):
        grid = np.clip(np.floor(z / FINGERPRINT_STEP + offset), -8, 8).astype(np.int8)
        digest = hashlib.sha256(f"{state.shape[1]}:{FINGERPRINT_POINTS}:".encode() + grid.tobytes())
        out.append(digest.hexdigest()[:32])
    return out[0], out[1]
