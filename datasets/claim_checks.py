"""The automatic re-check of a claimed episode (issue 28): which rejection reasons a machine can
verify, and whether what QA measures (stored, or measured again on the claimed time range)
confirms the reason. Pure: no Django, no storage (datasets/services/claims.py reads the file
and calls these).

A reason is auto-checkable when the data alone can show it:
- failed_task: the episode's own success label says the task failed.
- idle: idle for more than max_idle_fraction of the episode (or of the claimed range), or an
  idle head or tail QA flagged (longer than idle_edge_flag_seconds).
- jerky: a jump between two frames above max_speed / fps + jump_tolerance, or jerk at least
  jerk_reference (the smoothness term of the quality score at or below one half).
- low_quality: content QA run again on the episode (or the range) with today's thresholds
  fails one of its checks.
Everything else (wrong task, camera, mislabelled object, the operator's habits, other) needs a
person. A re-check that does not confirm never refuses anything by itself: the episode goes to
a dispute that staff decide.
"""

from dataclasses import dataclass

from datasets.qa_content import ContentReason, ContentReport, ContentThresholds

FAILED_TASK = "failed_task"
IDLE = "idle"
JERKY = "jerky"
LOW_QUALITY = "low_quality"
AUTO_CHECKED = frozenset({FAILED_TASK, IDLE, JERKY, LOW_QUALITY})
# Content QA is measured again (from the file) for these, and for any reason with a range.
MEASURED_AGAIN = frozenset({LOW_QUALITY})


def auto_checkable(reason_code: str) -> bool:
    return reason_code in AUTO_CHECKED


def needs_measuring(reason_code: str, *, has_range: bool) -> bool:
    """Whether the re-check must read the episode's file (else its stored figures do)."""
    return reason_code in MEASURED_AGAIN or (has_range and reason_code in (IDLE, JERKY))


@dataclass(frozen=True)
class Verdict:
    confirmed: bool
    detail: str  # what was compared, in words staff and the customer read


@dataclass(frozen=True)
class Measured:
    """What the re-check compares: the stored figures of the whole episode, or a fresh
    content report of the claimed range."""

    success: bool
    fps: int
    idle_fraction: float | None = None
    flags: tuple = ()
    max_step: float | None = None
    jerk: float | None = None
    failures: tuple = ()  # content QA failure codes (measured again only)

    @classmethod
    def stored(cls, *, success: bool, fps: int, idle_fraction, jerk, measurements: dict):
        return cls(
            success=success,
            fps=fps,
            idle_fraction=idle_fraction,
            flags=tuple(measurements.get("flags") or ()),
            max_step=measurements.get("max_step"),
            jerk=jerk,
        )

    @classmethod
    def of_report(cls, report: ContentReport, *, success: bool, fps: int):
        measurements = report.measurements
        return cls(
            success=success,
            fps=fps,
            idle_fraction=measurements.get("idle_fraction"),
            flags=tuple(measurements.get("flags") or ()),
            max_step=measurements.get("max_step"),
            jerk=measurements.get("jerk"),
            failures=tuple(
                code for code, _ in report.failures if code != ContentReason.NEAR_DUPLICATE
            ),
        )


def recheck(reason_code: str, measured: Measured, thresholds: ContentThresholds) -> Verdict:
    """Whether the measurements confirm an auto-checkable reason."""
    if reason_code == FAILED_TASK:
        if measured.success:
            return Verdict(False, "The fleet labelled this episode a success.")
        return Verdict(True, "The fleet labelled this episode a failure.")
    if reason_code == IDLE:
        return _idle(measured, thresholds)
    if reason_code == JERKY:
        return _jerky(measured, thresholds)
    if reason_code == LOW_QUALITY:
        if measured.failures:
            return Verdict(True, f"Content QA fails now: {', '.join(measured.failures)}.")
        return Verdict(False, "Content QA passes with today's thresholds.")
    raise ValueError(f"{reason_code} is not checked automatically")


def _idle(measured: Measured, thresholds: ContentThresholds) -> Verdict:
    fraction = measured.idle_fraction
    limit = thresholds.max_idle_fraction
    if fraction is None:
        return Verdict(False, "No idle measurement for this episode.")
    edges = [flag for flag in measured.flags if flag in ("idle_head", "idle_tail")]
    if fraction > limit:
        return Verdict(True, f"Idle {fraction:.0%} of the time; at most {limit:.0%} is allowed.")
    if edges:
        return Verdict(
            True,
            f"QA flagged an idle {' and '.join(e.split('_')[1] for e in edges)} longer than "
            f"{thresholds.idle_edge_flag_seconds:g} s.",
        )
    return Verdict(False, f"Idle {fraction:.0%} of the time (at most {limit:.0%} allowed).")


def _jerky(measured: Measured, thresholds: ContentThresholds) -> Verdict:
    bound = thresholds.max_speed / measured.fps + thresholds.jump_tolerance
    if measured.max_step is not None and measured.max_step > bound:
        return Verdict(
            True, f"A jump of {measured.max_step:.4g} between two frames; at most {bound:.4g}."
        )
    if measured.jerk is not None and measured.jerk >= thresholds.jerk_reference:
        return Verdict(
            True,
            f"Jerk {measured.jerk:.3g}/s³, at least the reference {thresholds.jerk_reference:g}"
            " (smoothness one half or less).",
        )
    jerk = "not measured" if measured.jerk is None else f"{measured.jerk:.3g}/s³"
    return Verdict(
        False, f"Jerk {jerk} (under {thresholds.jerk_reference:g}); no jump above {bound:.4g}."
    )
