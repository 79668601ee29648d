"""What the pages say instead of codes and raw numbers: QA reasons in words, durations in
hours and minutes. Presentation only; the codes themselves are datasets' (qa_checks.Reason).
"""

import re
from decimal import ROUND_HALF_UP, Decimal

# One sentence per QA reason code, as an operator or a customer reads it.
QA_REASONS = {
    "object_missing": "No file arrived for the episode (the upload never finished).",
    "size_mismatch": "The uploaded file's size differs from the size the fleet declared.",
    "checksum_mismatch": "The uploaded file's SHA-256 differs from the one declared: it was "
    "changed or damaged on the way.",
    "not_parquet": "The file is not a readable parquet file.",
    "missing_column": "A required column (joint state, action, timestamp or frame index) is "
    "missing.",
    "bad_dtype": "A column has the wrong data type (vectors must be floats).",
    "vector_length": "State or action vectors have the wrong length for this robot.",
    "frame_count": "Too few frames were recorded.",
    "frame_index": "Frame numbers skip or repeat.",
    "timestamps_not_monotonic": "Timestamps go backwards or repeat.",
    "timestamp_gap": "Frames are missing: the recording has a gap longer than 1.5 frame periods.",
    "fps_mismatch": "The recorded frame rate differs from the declared one by more than 5 %.",
    "non_finite": "Sensor values dropped out (NaN or infinite numbers in the recording).",
    "duration_out_of_bounds": "The episode is shorter or longer than the allowed duration.",
    "storage_error": "Storage could not be read while checking the episode.",
    "video_missing": "A camera's video never arrived (every ordered camera sends one MP4).",
    "video_unreadable": "A camera's file is not a readable video.",
    "video_container": "A camera's file is not an MP4 or MOV file of the kind the platform "
    "reads (another container such as Matroska or MPEG-TS, or an index larger than the "
    "episode's frames need).",
    "video_streams": "A camera's file holds something besides its one video stream (audio, "
    "data or more video streams).",
    "video_resolution_too_high": "A camera's resolution is above the largest the platform takes.",
    "video_resolution_changed": "A camera's picture changes size during the video (one size "
    "throughout).",
    "video_decode_budget": "A camera's video took more computing time to decode than an "
    "episode of its length may take.",
    "video_decode_error": "A camera's video is damaged or cut short: not every frame decodes.",
    "video_codec": "A camera's video uses a codec the platform does not take (H.264, HEVC or "
    "AV1 only).",
    "video_fps_mismatch": "A camera's frame rate differs from the episode's.",
    "video_variable_frame_rate": "A camera's frames are unevenly spaced (variable frame rate "
    "or dropped frames).",
    "video_timestamps": "A camera's frames are not at the times the episode's frame rate says.",
    "video_frame_count": "A camera's video has another number of frames than the recording "
    "has rows.",
    "video_resolution": "A camera's resolution is below what the order asks for.",
    "video_lengths_differ": "The cameras' videos have different numbers of frames.",
    "video_black": "A camera shows black frames for too long.",
    "video_frozen": "A camera's picture is frozen for too long.",
    "video_underexposed": "A camera's picture is too dark to see for too long.",
    "video_overexposed": "A camera's picture is blown out (over-exposed) for too long.",
    "sensor_missing": "A sensor stream the order includes (force/torque, tactile) is missing.",
    # Content QA (datasets/qa_content.py): the file is fine, the demonstration is not.
    "state_out_of_limits": "A joint or gripper reading lies outside the robot's physical limits.",
    "state_jump": "A joint jumps between two frames faster than the robot can move (a teleport).",
    "idle_episode": "The robot stands still for too much of the episode.",
    "frozen_signal": "A joint or gripper reading never changes during the episode (a frozen or "
    "disconnected sensor).",
    "action_state_mismatch": "The recorded actions do not match how the robot moved (actions "
    "must predict the next states).",
    "near_duplicate": "The same trajectory was already accepted: a re-submitted demonstration "
    "does not count again.",
    # The collection plan (datasets/qa_plan.py): the episode does not fit the order's plan.
    "object_not_in_plan": "The object handled is not in the order's plan (not registered at "
    "the site, of another category, or not one of the environment's objects).",
    "scene_not_in_plan": "The scene is not in the order's plan (none named, or another "
    "environment's).",
    "cell_full": "The episode's (environment, object) cell already holds its maximum share.",
    "calibration_missing": "A camera has no calibration for this robot.",
    "calibration_stale": "A camera's calibration is too old, or older than the scene's "
    "arrangement.",
}

# Content QA flags: measured and shown, never a rejection.
QA_FLAGS = {
    "idle_head": "The robot is idle for a while at the start.",
    "idle_tail": "The robot is idle for a while at the end.",
}

# Why a customer or staff excluded accepted episodes, or rejected them after delivery
# (datasets.models.ExclusionReason).
EXCLUSION_REASONS = {
    "operator_habits": "The operator's demonstrations are not usable (habits, style).",
    "idle": "The robot stands still for too much of the episode.",
    "jerky": "The motion is jerky or unsafe.",
    "wrong_task": "The episode does not show the task that was ordered.",
    "failed_task": "The task was not achieved.",
    "camera": "A camera's view is unusable (blocked, out of frame, too dark).",
    "low_quality": "The quality is below what the order needs.",
    "mislabelled_object": "An object handled is not the one labelled.",
    "other": "Another reason (see the note).",
}


def exclusion_reason_text(code: str) -> str:
    return EXCLUSION_REASONS.get(code, code)


def qa_flag_text(code: str) -> str:
    return QA_FLAGS.get(code, code)


def qa_reason_text(code: str) -> str:
    return QA_REASONS.get(code, f"Rejected by the check “{code}”.")


def duration_text(seconds: Decimal) -> str:
    """5496.002 -> '1 h 32 min'; 720 -> '12 min'; 45.2 -> '45 s'; 0 -> '0 min'."""
    seconds = Decimal(seconds)
    if seconds < 60:
        whole = int(seconds.quantize(Decimal(1), rounding=ROUND_HALF_UP))
        return f"{whole} s" if whole else "0 min"
    minutes = int((seconds / 60).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    hours, minutes = divmod(minutes, 60)
    if hours and minutes:
        return f"{hours} h {minutes} min"
    if hours:
        return f"{hours} h"
    return f"{minutes} min"


SECONDS_IN_TEXT = re.compile(r"\b(\d+(?:\.\d+)?) s\b")


def humanize_seconds(text: str) -> str:
    """'Dataset delivered: 12 episodes, 5496.002 s.' -> '... 12 episodes, 1 h 32 min.'"""
    return SECONDS_IN_TEXT.sub(lambda m: duration_text(Decimal(m.group(1))), text or "")


AMOUNT_IN_TEXT = re.compile(r"(-?\d+(?:\.\d+)?) ([A-Z]{3})(/h)?\b")


def readable_line(description: str, names: dict[str, str]) -> str:
    """A priced line as people read it: 'Sensor add-on force-torque: 40 h x 10.0000 USD/h'
    -> 'Sensor add-on Wrist force/torque sensor: 40 h x $10.00/h' (catalog names for slugs,
    amounts in the one money format)."""
    from orders.money import format_money, format_rate

    def amount(match: re.Match) -> str:
        value, currency, per_hour = Decimal(match.group(1)), match.group(2), match.group(3)
        return format_rate(value, currency) if per_hour else format_money(value, currency)

    text = AMOUNT_IN_TEXT.sub(amount, description or "")
    for slug, name in names.items():
        text = re.sub(rf"(?<![\w-]){re.escape(slug)}(?![\w-])", name, text)
    return text
