"""`fleet-agent --config fleet.toml [--once] [--defect-rate 0.1] [--max-seconds N]`.

Other flags: --wait-for-work (with --once), --seed, --retries, --register-only, --log-level.

Importing a fleet's own recordings (fleet_agent/importers/):

    fleet-agent import --config fleet.toml --mapping MAP.toml SOURCE
    fleet-agent watch  --config fleet.toml --mapping MAP.toml DIR [--once]

Exit status: 0 done (or stopped by SIGINT/SIGTERM), 1 the platform refused or could not be
reached, 2 a bad configuration or command line; import and watch: 3 done, but some
recordings failed (each is listed with its reason; the next run retries them).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys

from fleet_agent.agent import FleetAgent
from fleet_agent.client import ApiClient, ApiError, RetryPolicy, TransientError
from fleet_agent.config import PLAN_DEFECTS, ConfigError, load_config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleet-agent",
        description="Reference fleet agent: register, take offers, collect and upload episodes.",
        epilog="Import recordings: fleet-agent import --help, fleet-agent watch --help.",
    )
    parser.add_argument("--config", required=True, help="the fleet's TOML file")
    parser.add_argument(
        "--once",
        action="store_true",
        help="exit when nothing is left to do (held jobs done, no pending offer)",
    )
    parser.add_argument(
        "--wait-for-work",
        action="store_true",
        help="with --once: keep polling until at least one job has been completed",
    )
    parser.add_argument(
        "--defect-rate",
        type=float,
        default=None,
        help="share of episodes made defective for QA to reject (overrides the file)",
    )
    parser.add_argument(
        "--plan-defect",
        action="append",
        choices=PLAN_DEFECTS,
        default=None,
        help="send one episode with this collection plan mistake (repeatable; overrides the file)",
    )
    parser.add_argument(
        "--max-seconds", type=float, default=None, help="stop after this many seconds"
    )
    parser.add_argument("--seed", type=int, default=None, help="random seed (overrides the file)")
    parser.add_argument(
        "--register-only", action="store_true", help="register fleet, sites, robots and exit"
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=6,
        help="tries per request on connection errors, 5xx and 429 (6), with backoff",
    )
    parser.add_argument(
        "--job",
        default=None,
        help="work on this job only (its id, from the job page); take no new offers",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING (INFO)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("import", "watch"):
        from fleet_agent.importers.command import main as import_main

        return import_main(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.defect_rate is not None and not 0 <= args.defect_rate <= 1:
        parser.error("--defect-rate must be between 0 and 1")
    if args.retries < 1:
        parser.error("--retries must be at least 1")
    if args.max_seconds is not None and args.max_seconds <= 0:
        parser.error("--max-seconds must be > 0")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"fleet-agent: {exc}", file=sys.stderr)
        return 2
    client = ApiClient(config.base_url, config.api_key, retry=RetryPolicy(attempts=args.retries))
    agent = FleetAgent(
        config,
        client=client,
        defect_rate=args.defect_rate,
        seed=args.seed,
        only_job=args.job,
        plan_defects=args.plan_defect,
    )

    def stop(signum, frame):
        logging.getLogger("fleet_agent").info("signal %s: stopping after this step", signum)
        agent.stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        agent.register()
        if agent.webhook_secret and agent.receiver is None:  # for the operator's own receiver
            print(f"webhook secret (shown once): {agent.webhook_secret}", file=sys.stderr)
        if args.register_only:
            return 0
        summary = agent.run(
            max_seconds=args.max_seconds,
            stop_when_idle=args.once,
            wait_for_work=args.wait_for_work,
        )
    except (ApiError, TransientError) as exc:
        print(f"fleet-agent: {exc}", file=sys.stderr)
        return 1
    finally:
        agent.close()
    print(json.dumps(summary.as_dict(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
