"""The reference fleet agent of the motion-data marketplace.

A fleet operator's program that uses only the public HTTP API: it registers a fleet, its
sites and robots from a TOML file, accepts offers, "collects" synthetic episodes in the
documented parquet format, uploads them through presigned URLs, completes them and keeps
the platform informed with heartbeats and progress. See fleet_agent/README.md.

    from fleet_agent import FleetAgent, load_config
    summary = FleetAgent(load_config("fleet.toml"), defect_rate=0.1).run_once(max_seconds=120)
"""

from fleet_agent.agent import FleetAgent, RunSummary
from fleet_agent.client import ApiClient, ApiError, RetryPolicy, TransientError
from fleet_agent.config import AgentConfig, ConfigError, load_config, parse_config
from fleet_agent.episodes import DEFECTS, Episode, make_episode

__all__ = [
    "DEFECTS",
    "AgentConfig",
    "ApiClient",
    "ApiError",
    "ConfigError",
    "Episode",
    "FleetAgent",
    "RetryPolicy",
    "RunSummary",
    "TransientError",
    "load_config",
    "make_episode",
    "parse_config",
]
__version__ = "0.1.0"
