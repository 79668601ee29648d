"""Settings for benchmarks: the project's, plus a bare DRF endpoint, without throttling."""

from marketplace.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
DEBUG = False
REST_FRAMEWORK = {
    **REST_FRAMEWORK,  # noqa: F405
    "DEFAULT_THROTTLE_RATES": {"anon": "1000000/second", "user": "1000000/second"},
}
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
