"""The thresholds content QA applies to an embodiment's episodes, in one place: the catalog
shows them (orders/api.py) and datasets' QA applies them (datasets/services/qa.py builds its
ContentThresholds from this). Per state element limits are the embodiment's; the rest come
from settings (EPISODE_QA_*, documented in datasets/README.md)."""

from django.conf import settings


def content_qa_thresholds(embodiment) -> dict:
    return {
        "state_limits": [list(pair) for pair in embodiment.state_limits or []],
        "limit_tolerance": settings.EPISODE_QA_LIMIT_TOLERANCE,
        "max_speed": settings.EPISODE_QA_MAX_SPEED,
        "jump_tolerance": settings.EPISODE_QA_JUMP_TOLERANCE,
        "idle_speed": settings.EPISODE_QA_IDLE_SPEED,
        "max_idle_fraction": settings.EPISODE_QA_MAX_IDLE_FRACTION,
        "idle_edge_flag_seconds": settings.EPISODE_QA_IDLE_EDGE_FLAG_SECONDS,
        "frozen_epsilon": settings.EPISODE_QA_FROZEN_EPSILON,
        "min_action_correlation": settings.EPISODE_QA_MIN_ACTION_CORRELATION,
        "max_action_lag_seconds": settings.EPISODE_QA_MAX_ACTION_LAG_SECONDS,
        "jerk_reference": settings.EPISODE_QA_JERK_REFERENCE,
    }
