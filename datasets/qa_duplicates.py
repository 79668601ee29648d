"""Near-duplicate fingerprints of a trajectory (issue 28): survive shifts, crops, splits,
resampling and small noise. Pure numpy; datasets/services/duplicates.py stores and looks up.

- The state is resampled at SAMPLE_HZ on the episode's own clock (frame / fps, so another
  frame rate or every other frame dropped gives the same samples), each sample the mean of
  SMOOTH_TAPS frames spread over SMOOTH_SECONDS (noise averages out, the cost is bounded
  whatever the frame rate). These samples (float32) are stored: the alignment check reads them.
- Landmarks: each element's turning points (a maximum or minimum the element then leaves by
  more than LIMITS_TURN_SHARE of its range between the embodiment's limits, or without limits
  TURN_SHARE of its own range: smaller wiggles and noise are no landmark), timed when the
  element has left it by half that swing (on the slope, interpolated between two samples: a
  flat turn or noise barely moves that time, as they move the extreme's). Their times do not
  depend on where the episode starts, its frame rate or its sampling phase.
- Keys: each landmark with two of the next FAN_OUT (within MAX_GAP_SECONDS), as
  (element and kind of the three, the two gaps in GAP_STEP bins), hashed to 64 bits. The
  stored keys are winnowed (the smallest hash of every WINNOW consecutive ones, as MOSS does:
  any run of WINNOW shared keys shares a stored one); the keys looked up are all of the new
  episode's, each with the neighbouring gap bin too when a gap is within GAP_JITTER of a bin's
  edge. A landmark lost or added to noise breaks a few keys, not the episode's.
- Confirmation (`repeats`): a key shared is only a candidate. The new episode is cut
  into SEGMENT_SECONDS segments; each is compared with the candidate's samples at every offset
  (OFFSET_STEP) within SEARCH_SECONDS of the keys' offset, the candidate's samples linearly
  interpolated; a segment matches when its RMS distance, per element in units of the element's
  spread in the new episode, is at most MATCH_DISTANCE. Segments align on their own, so frames
  dropped here and there (a drifting clock) still match. A duplicate is an episode whose
  matched segments are at least DUPLICATE_SHARE of its segments that move (of at most
  MAX_SEGMENTS of them, evenly spread, in a long episode).
"""

from dataclasses import dataclass

import numpy as np

VERSION = 1
SAMPLE_HZ = 10
SMOOTH_SECONDS = 0.2
SMOOTH_TAPS = 8
LIMITS_TURN_SHARE = 0.04  # of the element's range between the embodiment's limits
TURN_SHARE = 0.1  # without limits: of the element's own range (5th to 95th percentile)
DEPARTURE_SAMPLES = 20 * SAMPLE_HZ  # how far after a turning point its departure is looked for
FAN_OUT = 3
MAX_GAP_SECONDS = 6.0
GAP_STEP = 0.25  # s: the gaps' bins
GAP_JITTER = 0.06  # s: a gap this close to a bin's edge is looked up in both bins
WINNOW = 4
MAX_LOOKUP_KEYS = 8000  # more (a long episode): the winnowed keys are looked up, not all,
# and if still more, those whose value is a multiple of the ratio
SEGMENT_SECONDS = 3.0
SEARCH_SECONDS = 1.0
OFFSET_STEP = 0.02
MATCH_DISTANCE = 0.06  # copies measured <= 0.03, re-performed motions >= 0.13
DUPLICATE_SHARE = 0.5
MIN_VOTES = 2  # keys a candidate must share (at one offset) to be aligned at all
MAX_SEGMENTS = 40  # judged at most (evenly spread): the decision's time stays bounded
MOVING_SPREAD = 1e-3  # a segment whose elements all move less than this (units) is not judged
# Camera videos (their 4x4 block-luma digests in [0, 1] as the "state"): a turning point is a
# swing of LIMITS_TURN_SHARE of half the luma range (0.02: 5 levels of 255), not of a block's
# own range (a block the motion never crosses would turn on encoder noise); the distance is
# in units of at least VIDEO_SPREAD of luma (not of a still block's tiny spread) and leaves
# out each block's mean difference over a segment (a re-encode's or resize's brightness bias)
VIDEO_LIMITS = ((0.0, 0.5),) * 16
VIDEO_SPREAD = 0.03

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass
class Signature:
    """What QA computes in its sandbox and the decision stores (or looks up)."""

    samples: np.ndarray  # float32, SAMPLE_HZ samples x D
    keys: np.ndarray  # int64: the winnowed keys, stored
    key_times: np.ndarray  # int32: each stored key's first landmark, in samples
    lookup: np.ndarray  # int64: the keys looked up (all, each gap's neighbouring bin too)
    lookup_times: np.ndarray  # int32

    @property
    def dim(self) -> int:
        return int(self.samples.shape[1])


def trajectory_signature(state: np.ndarray, fps: int, limits=()) -> Signature:
    """The signature of a finite (frames, D) state recorded at `fps`; `limits` the
    embodiment's ((low, high), ...) per element, when it declares them."""
    samples = resampled(state, fps)
    times, codes = landmarks(samples, limits)
    triples = _triples(times, codes)
    dim = samples.shape[1]
    keys, key_times = _keys(triples, dim, exact=True)
    chosen = _winnowed(keys)
    lookup, lookup_times = _keys(triples, dim, exact=False)
    if len(lookup) > MAX_LOOKUP_KEYS:
        times, codes, *landmark_indexes = triples
        subset = (times, codes, *(indexes[chosen] for indexes in landmark_indexes))
        lookup, lookup_times = _keys(subset, dim, exact=False)
    if len(lookup) > MAX_LOOKUP_KEYS:  # still (a long episode of many elements): a sample of
        # keys chosen by value, so a key shared with a stored episode is kept on both sides
        keep = lookup % -(-len(lookup) // MAX_LOOKUP_KEYS) == 0
        lookup, lookup_times = lookup[keep], lookup_times[keep]
    return Signature(
        samples=samples.astype(np.float32),
        keys=keys[chosen],
        key_times=key_times[chosen],
        lookup=lookup,
        lookup_times=lookup_times,
    )


def resampled(state: np.ndarray, fps: int) -> np.ndarray:
    """The state at t = 0, 1/SAMPLE_HZ, ... (frame / fps), each the mean of SMOOTH_TAPS frames
    over SMOOTH_SECONDS around t (clipped to the episode), float64 samples x D."""
    frames, dim = state.shape
    count = int(np.floor((frames - 1) / fps * SAMPLE_HZ + 1e-9)) + 1
    times = np.arange(count) / SAMPLE_HZ
    taps = ((np.arange(SMOOTH_TAPS) + 0.5) / SMOOTH_TAPS - 0.5) * SMOOTH_SECONDS
    out = np.zeros((count, dim))
    for tap in taps:
        rows = np.clip(np.rint((times + tap) * fps), 0, frames - 1).astype(np.intp)
        out += state[rows]
    return out / SMOOTH_TAPS


def landmarks(samples: np.ndarray, limits=()) -> tuple[np.ndarray, np.ndarray]:
    """Every element's turning points: (times in samples, codes 2 x element + is-maximum),
    in time order. The swing that makes one: a share of the element's range between the
    embodiment's limits (the same for a crop as for the whole), else of its own 5-95 %."""
    bounds = np.asarray(limits, dtype=np.float64).reshape(-1, 2)
    if len(bounds) == samples.shape[1]:
        swings = LIMITS_TURN_SHARE * (bounds[:, 1] - bounds[:, 0])
    else:
        low, high = np.percentile(samples, [5, 95], axis=0)
        swings = TURN_SHARE * (high - low)
    found_times, found_codes = [], []
    for element in range(samples.shape[1]):
        x = samples[:, element]
        for index, is_max in _turning_points(x, swings[element]):
            found_times.append(_departure(x, index, is_max, swings[element] / 2))
            found_codes.append(2 * element + is_max)
    times = np.asarray(found_times, dtype=np.float64)
    codes = np.asarray(found_codes, dtype=np.int64)
    order = np.argsort(times, kind="stable")
    return times[order], codes[order]


def _turning_points(x: np.ndarray, swing: float) -> list[tuple[int, int]]:
    """The local extrema of x that x then leaves by at least `swing` (a zigzag over the
    candidate extrema numpy finds: where the step's sign changes), after the first swing
    (where the episode starts is no landmark: a crop starts anywhere; nor an extreme it
    reaches by less than half a swing from there)."""
    if swing <= 0 or len(x) < 3:
        return []
    steps = np.sign(np.diff(x))
    moving = np.flatnonzero(steps)
    if len(moving) < 2:
        return []
    signs = steps[moving]
    change = np.flatnonzero(signs[1:] != signs[:-1])
    # the first sample, then each where the direction changed
    candidates = np.r_[0, moving[change + 1]]
    values = x[candidates]
    found = []
    direction = 0  # +1: rising to a maximum, -1: falling to a minimum, 0: not known yet
    low = high = extreme = 0
    for position in range(len(candidates)):
        value = values[position]
        if direction == 0:
            low = position if value < values[low] else low
            high = position if value > values[high] else high
            if values[high] - values[low] >= swing:
                direction = 1 if high > low else -1
                first, extreme = (low, high) if direction == 1 else (high, low)
                # the start is no turning point, nor one it barely passed (noise)
                if first and abs(values[first] - values[0]) >= swing / 2:
                    found.append((int(candidates[first]), int(direction == -1)))
        elif direction * (value - values[extreme]) > 0:
            extreme = position
        elif direction * (values[extreme] - value) >= swing:
            found.append((int(candidates[extreme]), int(direction == 1)))
            direction, extreme = -direction, position
    return found


def _departure(x: np.ndarray, index: int, is_max: int, distance: float) -> float:
    """When x, leaving its turning point at `index`, is `distance` away from it (linearly
    interpolated, in samples): on the slope, so noise and a flat turn barely move it."""
    ahead = x[index : index + DEPARTURE_SAMPLES]
    moved = (x[index] - ahead) if is_max else (ahead - x[index])
    beyond = np.flatnonzero(moved >= distance)
    if not len(beyond) or beyond[0] == 0:
        return float(index)
    after = int(beyond[0])
    before = moved[after - 1]
    return index + after - 1 + float((distance - before) / (moved[after] - before))


def _triples(times: np.ndarray, codes: np.ndarray):
    """Each landmark i with two later ones j < k among its next FAN_OUT, k within
    MAX_GAP_SECONDS: (i, j, k) index arrays, ordered by i."""
    count = len(times)
    pairs = [(a, b) for a in range(1, FAN_OUT + 1) for b in range(a + 1, FAN_OUT + 1)]
    first = np.repeat(np.arange(count), len(pairs))
    second = first + np.tile([a for a, _ in pairs], count)
    third = first + np.tile([b for _, b in pairs], count)
    keep = third < count
    first, second, third = first[keep], second[keep], third[keep]
    keep = times[third] - times[first] <= MAX_GAP_SECONDS * SAMPLE_HZ
    first, second, third = first[keep], second[keep], third[keep]
    order = np.argsort(first, kind="stable")
    return times, codes, first[order], second[order], third[order]


def _keys(triples, dim: int, *, exact: bool) -> tuple[np.ndarray, np.ndarray]:
    """The triples' keys (exact: the gaps' own bins; else each gap near a bin's edge in both
    bins) and their first landmark's time, in samples."""
    times, codes, first, second, third = triples
    gaps = (times[second] - times[first], times[third] - times[second])
    step, jitter = GAP_STEP * SAMPLE_HZ, 0 if exact else GAP_JITTER * SAMPLE_HZ
    variants = []
    for shift_one in (-jitter, jitter):
        for shift_two in (-jitter, jitter):
            bin_one = np.floor((gaps[0] + shift_one) / step)
            bin_two = np.floor((gaps[1] + shift_two) / step)
            variants.append(_hash(dim, codes[first], codes[second], codes[third], bin_one, bin_two))
    keys = np.concatenate(variants)
    at = np.tile(np.floor(times[first]).astype(np.int32), 4)
    if exact:
        return variants[0], at[: len(first)]
    pairs = np.unique(np.stack([keys, at.astype(np.int64)]), axis=1)
    return pairs[0], pairs[1].astype(np.int32)


def _hash(dim, one, two, three, gap_one, gap_two) -> np.ndarray:
    """64-bit keys (splitmix64 of the packed fields), as int64 (a PostgreSQL bigint)."""
    packed = ((((np.int64(VERSION) * 4096 + dim) * 512 + one) * 512 + two) * 512 + three) * 4096 + (
        gap_one.astype(np.int64) * 64 + gap_two.astype(np.int64)
    )
    z = packed.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        z = z ^ (z >> np.uint64(31))
    return z.view(np.int64)


def _winnowed(keys: np.ndarray) -> np.ndarray:
    """Indexes of the smallest key of every WINNOW consecutive keys (each once, in order)."""
    if len(keys) <= WINNOW:
        return np.arange(len(keys))
    windows = np.lib.stride_tricks.sliding_window_view(keys, WINNOW)
    return np.unique(np.arange(len(windows)) + windows.argmin(axis=1))


def candidate_offsets(
    signature: Signature, hits: list[tuple[object, int, int]]
) -> list[tuple[object, int, int]]:
    """From (episode, key, time) rows found for the lookup keys: per episode, the offset (old
    time - new time, in samples, to SEARCH_SECONDS) most keys agree on, and how many do, most
    votes first: [(episode, offset, votes)]."""
    at_new: dict[int, list[int]] = {}
    for key, time in zip(signature.lookup.tolist(), signature.lookup_times.tolist(), strict=True):
        at_new.setdefault(key, []).append(time)
    bucket = SEARCH_SECONDS * SAMPLE_HZ
    votes: dict[tuple, set] = {}
    for episode, key, old_time in hits:
        for new_time in at_new.get(key, ()):
            offset = round((old_time - new_time) / bucket)
            votes.setdefault((episode, offset), set()).add(key)
    best: dict[object, tuple[int, int]] = {}
    for (episode, offset), keys in votes.items():
        if len(keys) > best.get(episode, (0, 0))[1]:
            best[episode] = (int(offset * bucket), len(keys))
    ranked = sorted(best.items(), key=lambda item: -item[1][1])
    return [(episode, offset, count) for episode, (offset, count) in ranked if count >= MIN_VOTES]


def repeats(
    new: np.ndarray,
    old: np.ndarray,
    offset: int,
    *,
    spread: float = MOVING_SPREAD,
    centred: bool = False,
) -> bool:
    """Whether at least DUPLICATE_SHARE of the new samples' moving segments match the old
    samples at an offset within SEARCH_SECONDS of `offset` (samples); stops as soon as the
    answer is known. `spread`: the least per-element scale, and the least swing of a segment
    that moves; `centred`: each element's mean difference over a segment is left out (a
    constant offset, as a re-encode's brightness bias, is no difference)."""
    new, old = np.asarray(new, dtype=np.float64), np.asarray(old, dtype=np.float64)
    if new.shape[1] != old.shape[1] or len(old) < 2:
        return False
    scale = np.maximum(new.std(axis=0), spread)
    length = min(len(new), round(SEGMENT_SECONDS * SAMPLE_HZ))
    count = len(new) // length
    segments = new[: count * length].reshape(count, length, -1)
    moving = np.flatnonzero(np.ptp(segments, axis=1).max(axis=1) >= spread)
    if len(moving) > MAX_SEGMENTS:  # a long episode: judged on segments spread over it
        moving = moving[
            np.unique(np.linspace(0, len(moving) - 1, MAX_SEGMENTS).round().astype(int))
        ]
    needed = int(np.ceil(DUPLICATE_SHARE * len(moving)))
    matched = failed = 0
    for number in moving:
        if (
            _segment_distance(segments[number], number * length, old, offset, scale, centred)
            <= MATCH_DISTANCE
        ):
            matched += 1
        else:
            failed += 1
        if matched >= needed or failed > len(moving) - needed:
            break
    return bool(len(moving)) and matched >= needed


def _segment_distance(segment, start, old, offset, scale, centred=False) -> float:
    """The smallest RMS distance (in units of `scale`) between the segment and the old samples
    at start + a shift within SEARCH_SECONDS of offset: every whole sample first, then around
    the best in OFFSET_STEP steps (the old samples linearly interpolated)."""
    reach = round(SEARCH_SECONDS * SAMPLE_HZ)
    coarse = offset + np.arange(-reach, reach + 1, dtype=np.float64)
    best, at = _distances(segment, start, old, coarse, scale, centred)
    if at is None:
        return np.inf
    fine = at + np.arange(-1, 1 + 1e-9, OFFSET_STEP * SAMPLE_HZ)
    finer, _ = _distances(segment, start, old, fine, scale, centred)
    return min(best, finer)


def _distances(segment, start, old, shifts, scale, centred=False) -> tuple[float, float | None]:
    """The smallest distance over the shifts that keep the segment within the old episode,
    and its shift (None when none does); centred: less each element's mean difference."""
    at = start + np.arange(len(segment))[None, :] + shifts[:, None]  # shifts x length
    inside = (at[:, 0] >= 0) & (at[:, -1] <= len(old) - 1)
    if not inside.any():
        return np.inf, None
    at, shifts = at[inside], shifts[inside]
    low = np.floor(at).astype(np.intp)
    high = np.minimum(low + 1, len(old) - 1)
    weight = (at - low)[..., None]
    interpolated = old[low] * (1 - weight) + old[high] * weight  # shifts x length x D
    difference = (interpolated - segment[None]) / scale
    if centred:
        difference = difference - difference.mean(axis=1, keepdims=True)
    squares = np.einsum("slk,slk->s", difference, difference)
    best = int(squares.argmin())
    return float(np.sqrt(squares[best] / segment.size)), float(shifts[best])
