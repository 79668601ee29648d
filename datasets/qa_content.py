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
    # (a chunk, a sampled row), so no full float64 copy is made
    state = np.asarray(state)
    if state.dtype != np.float32:
        state = np.asarray(state, dtype=np.float64)
    action = np.asarray(action)  # only its sampled rows are read (and converted)
    names = _names(thresholds, state.shape[1])
    # one pass over the state gathers what the checks share (extremes, steps, the smoothed
    # state's moves, jerk and fingerprint points)
    summary = _summarise(state, max(1, round(SMOOTH_SECONDS * fps)), fps)
    extremes = summary.lowest, summary.highest
    _check_limits(state, extremes, thresholds, names, report)
    _check_jumps(summary, len(state), fps, thresholds, names, report)
    ptp = extremes[1] - extremes[0]
    _check_frozen(ptp, thresholds, names, report)
    idle = _measure_idle(summary, fps, thresholds, report)
    correlation = _check_action_state(state, action, ptp, fps, thresholds, report)
    report.measurements["jerk"] = round(summary.jerk, 4)
    report.quality_score = quality_score(
        idle_fraction=idle, correlation=correlation, jerk=summary.jerk, thresholds=thresholds
    )
    report.fingerprints = _fingerprints(summary, len(state))
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


def _check_jumps(summary, frames, fps, thresholds, names, report) -> None:
    if frames < 2:
        return
    bound = thresholds.max_speed / fps + thresholds.jump_tolerance
    largest, frame, element = summary.largest_step
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


@dataclass
class _Summary:
    lowest: np.ndarray
    highest: np.ndarray
    total: np.ndarray  # per element sum
    squares: np.ndarray  # per element sum of squares
    largest_step: tuple  # (|step|, frame, element): the first largest, in frame order
    window: int  # frames the state is smoothed over (shorter for a short episode)
    idle_stride: int  # idle is looked at every idle_stride frames ...
    idle_span: int  # ... as the move of the smoothed state over idle_span frames
    fastest_moves: np.ndarray  # per idle position: the fastest element's move (window sums)
    jerk: float  # RMS third derivative of the smoothed state, units/s^3
    points: np.ndarray  # the smoothed state at FINGERPRINT_POINTS frames, points x D


def _summarise(state: np.ndarray, window: int, fps: int) -> _Summary:
    """One pass over the state in row chunks, each converted to float64 element by frame
    (D x rows) once and reduced while it is in cache: extremes, sums, sums of squares, the
    largest step between two frames, and the smoothed state's (moving window sums') moves
    for idle, its third differences for jerk and its values at the fingerprint points. The
    window sums are summed directly (_window_sums) rather than as differences of prefix
    sums: as exact, and a cumulative sum is a serial loop numpy does not vectorise (3x
    slower at D = 8); they are kept per chunk only (an n x D array is page faults and cache
    misses costing as much as the arithmetic)."""
    n, dim = state.shape
    w = max(1, min(window, n // 2))  # a short episode: a shorter window
    length = n - w + 1  # window sums: the smoothed state at frames 0 .. length - 1
    # idle: positions t = 0, stride, ... < idle_stop, moves sums[t + span] - sums[t]
    span = max(1, min(round(MOTION_SECONDS * fps), length - 1))
    stride = max(1, round(IDLE_STEP_SECONDS * fps))
    idle_stop = max(1, length - span)
    # jerk: samples every `step` frames; a third difference from each of the first K - 3
    step = max(1, round(JERK_STEP_SECONDS * fps))
    samples = -(-length // step)
    jerk_stop = (samples - 3) * step
    points = np.linspace(0, length - 1, FINGERPRINT_POINTS).round().astype(int)
    reach = max(span, 3 * step)  # window sums past a chunk's own that idle and jerk read
    halo = max(w - 1 + reach, 1)  # frames past the chunk its window sums or last step read

    lowest, highest = np.full(dim, np.inf), np.full(dim, -np.inf)
    total, squares = np.zeros(dim), np.zeros(dim)
    largest = (-1.0, 0, 0)
    fastest = np.zeros(-(-idle_stop // stride))  # one frame: no motion, idle
    jerk_squares = 0.0
    at_points = np.empty((dim, FINGERPRINT_POINTS))
    sums_buffer = np.empty((dim, min(length, CHUNK_ROWS + reach)))
    scratch = _Scratch(3, dim * min(n, CHUNK_ROWS + halo))
    for start in range(0, n, CHUNK_ROWS):
        stop = min(n, start + CHUNK_ROWS)
        rows = state[start : min(n, stop + halo)]
        block = scratch.get(0, (dim, len(rows)))
        np.copyto(block, rows.T)  # element by frame, float64
        own = block[:, : stop - start]
        np.minimum(lowest, own.min(axis=1), out=lowest)
        np.maximum(highest, own.max(axis=1), out=highest)
        total += own.sum(axis=1)
        squares += np.einsum("ij,ij->i", own, own)
        pairs = min(stop, n - 1) - start  # steps (t, t + 1) from this chunk's frames
        if pairs > 0:
            largest = _largest_step(block, pairs, start, largest, scratch)
        own_end = min(stop, length)  # window sums starting in this chunk: start .. own_end - 1
        if own_end <= start:
            continue
        sums = sums_buffer[:, : min(length, own_end + reach) - start]
        _window_sums(block, w, sums, scratch)
        if length >= 2:
            _idle_moves(sums, start, min(own_end, idle_stop), span, stride, fastest, scratch)
        if samples >= 4:
            end = min(own_end, jerk_stop)
            jerk_squares += _third_difference_squares(sums, start, end, step, scratch)
        mine = (points >= start) & (points < own_end)
        at_points[:, mine] = sums[:, points[mine] - start]
    jerk = 0.0
    if samples >= 4:
        mean_square = jerk_squares / (dim * (samples - 3))
        jerk = float(np.sqrt(mean_square) / w / (step / fps) ** 3)
    return _Summary(
        lowest,
        highest,
        total,
        squares,
        largest,
        w,
        stride,
        span,
        fastest,
        jerk,
        (at_points / w).T,
    )


class _Scratch:
    """Work arrays reused from chunk to chunk, by slot (each at most `size` values): fresh
    arrays are fresh pages, and in the sandbox's forked child every fresh page is a page
    fault (~4 us here), as costly as the arithmetic on it."""

    def __init__(self, slots: int, size: int):
        self.flat = [np.empty(size) for _ in range(slots)]

    def get(self, slot: int, shape: tuple) -> np.ndarray:
        return self.flat[slot][: shape[0] * shape[1]].reshape(shape)


def _largest_step(block, pairs, start, largest, scratch) -> tuple:
    """The largest |step| between frames t and t + 1 of this chunk's pairs, as (|step|, frame,
    element), if larger than `largest` (the first largest, as one argmax would find). The
    largest |step| is max(largest rise, -largest fall): no |steps| array is made."""
    steps = np.subtract(
        block[:, 1 : pairs + 1], block[:, :pairs], out=scratch.get(1, (len(block), pairs))
    )
    rise, fall = steps.max(axis=1), steps.min(axis=1)  # per element
    top = max(float(rise.max()), -float(fall.min()))
    if not top > largest[0]:
        return largest
    frame = int(np.argmax((np.abs(steps) == top).any(axis=0)))
    return top, start + frame, int(np.argmax(np.abs(steps[:, frame])))


def _idle_moves(sums, start, end, span, stride, out, scratch) -> None:
    """out[t // stride] = the fastest element's |sums[t + span] - sums[t]| for the idle
    positions t (multiples of stride) in start .. end - 1; `sums` starts at frame `start`."""
    first = -(-start // stride) * stride
    if first >= end:
        return
    local, local_end = first - start, end - start
    later, earlier = (
        sums[:, local + span : local_end + span : stride],
        sums[:, local:local_end:stride],
    )
    moved = np.subtract(later, earlier, out=scratch.get(1, later.shape))
    out[first // stride : first // stride + moved.shape[1]] = np.abs(moved, out=moved).max(axis=0)


def _third_difference_squares(sums, start, end, step, scratch) -> float:
    """The sum of squares of the third differences x3 - 3 x2 + 3 x1 - x0 of the samples
    x = sums[::step] that start at the sample positions in start .. end - 1."""
    first = -(-start // step) * step
    if first >= end:
        return 0.0
    count = -(-(end - first) // step)
    x = sums[:, first - start : first - start + (count + 3) * step : step]
    shape = (len(x), x.shape[1] - 3)
    third = np.subtract(x[:, 3:], x[:, :-3], out=scratch.get(1, shape))
    inner = np.subtract(x[:, 2:-1], x[:, 1:-2], out=scratch.get(2, shape))
    inner *= 3
    third -= inner
    return float(np.einsum("ij,ij->", third, third))


def _window_sums(block: np.ndarray, w: int, out: np.ndarray, scratch=None) -> None:
    """out[:, i] = block[:, i : i + w].sum(axis=1) for every column of out, by doubling:
    sums of 2, 4, 8, ... frames, then those of w's binary digits added (3 vector adds for
    w = 6 instead of 5). The doubled sums go to scratch slots 1 and 2 in turn."""
    windows = out.shape[1]
    scratch = scratch or _Scratch(3, block.size)
    slot = 1
    covered, spans, span = 0, block, 1  # spans[:, i]: the sum of frames i .. i + span - 1
    while True:
        if w & span:
            digit = spans[:, covered : covered + windows]
            if covered:
                out += digit
            else:
                out[...] = digit
            covered += span
        if span * 2 > w:
            return
        shape = (len(spans), spans.shape[1] - span)
        spans = np.add(spans[:, :-span], spans[:, span:], out=scratch.get(slot, shape))
        slot, span = 3 - slot, span * 2


def _measure_idle(summary: _Summary, fps, thresholds, report) -> float:
    """Idle where the fastest element's smoothed speed over MOTION_SECONDS is under
    idle_speed, looked at every IDLE_STEP_SECONDS."""
    stride = summary.idle_stride
    # speed = move / window * fps / span; the threshold is scaled instead
    idle = summary.fastest_moves < thresholds.idle_speed * summary.window * summary.idle_span / fps
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
    scores = correlate.medians(list({*range(0, max_lag + 1, 2), max_lag}))
    coarse = max(scores, key=scores.get)
    neighbours = [lag for lag in (coarse - 1, coarse + 1) if 0 <= lag <= max_lag]
    scores.update(correlate.medians([lag for lag in neighbours if lag not in scores]))
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
        a = np.array(action[::stride, columns].T, dtype=np.float64, order="C")  # a copy
        a -= a.sum(axis=1, keepdims=True) / a.shape[1]  # centred once: the sums lose no precision
        self.a = a
        self.a_totals = a.sum(axis=1), _row_squares(a)
        # state[lag::stride] is the (lag % stride)-th of these grids, from frame lag // stride
        # on. Not centred: the covariance below already subtracts the means, and with the
        # action centred the rounding left is ~1e-10 of the variance of any element moving
        # enough to be checked (a centring pass over strided rows would cost more than the rest).
        self.state, self.columns = state, columns
        # One grid at a time, in one buffer: in the sandbox's forked child every fresh page
        # is a page fault (~4 us here), as costly as the arithmetic on it.
        self.buffer = np.empty(a.size)

    def medians(self, lags: list) -> dict:
        """{lag: median(lag)} in the order of `lags`, computed grid by grid."""
        by_offset = {}
        for lag in lags:
            by_offset.setdefault(lag % self.stride, []).append(lag)
        found = {}
        for offset, group in by_offset.items():
            grid = self._grid(offset)
            for lag in group:
                found[lag] = self._median(grid, lag)
        return {lag: found[lag] for lag in lags}

    def _grid(self, offset: int):
        """state[offset::stride, columns] element by frame in the buffer, its row sums and
        its row sums of squares."""
        rows = self.state[offset :: self.stride, self.columns]
        grid = self.buffer[: rows.size].reshape(rows.shape[1], rows.shape[0])
        np.copyto(grid, rows.T)
        return grid, grid.sum(axis=1), _row_squares(grid)

    def _median(self, grid_sums, lag: int) -> float:
        grid, s_total, s2_total = grid_sums
        skip = lag // self.stride
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
        return _median(correlation)


def _median(values: np.ndarray) -> float:
    """np.median of a few values (one per element), without its general machinery."""
    ordered = np.sort(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return float((ordered[middle - 1] + ordered[middle]) / 2)


def _row_squares(x: np.ndarray) -> np.ndarray:
    """Per row sum of squares of a D x n array."""
    return np.einsum("ji,ji->j", x, x)


def fingerprints(state: np.ndarray, fps: int) -> tuple[str, str]:
    """Two hex fingerprints of the downsampled, normalised trajectory (see the module doc)."""
    state = np.asarray(state)
    if state.dtype != np.float32:
        state = np.asarray(state, dtype=np.float64)
    return _fingerprints(_summarise(state, max(1, round(SMOOTH_SECONDS * fps)), fps), len(state))


def _fingerprints(summary: _Summary, frames: int) -> tuple[str, str]:
    mean = summary.total / frames
    # E[x^2] - mean^2: exact enough for a normaliser (an element whose spread is lost to
    # rounding moves less than any threshold), without an n x D centred copy
    spread = np.sqrt(np.maximum(summary.squares / frames - mean * mean, 0.0))
    z = (summary.points - mean) / np.maximum(spread, 1e-3)
    out = []
    for offset in (0.0, 0.5):
        grid = np.clip(np.floor(z / FINGERPRINT_STEP + offset), -8, 8).astype(np.int8)
        dim = summary.points.shape[1]
        digest = hashlib.sha256(f"{dim}:{FINGERPRINT_POINTS}:".encode() + grid.tobytes())
        out.append(digest.hexdigest()[:32])
    return out[0], out[1]
