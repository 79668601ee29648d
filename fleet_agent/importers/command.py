"""`fleet-agent import` and `fleet-agent watch` (dispatched from fleet_agent/cli.py).

    fleet-agent import --config fleet.toml --mapping MAP.toml SOURCE [--journal PATH]
    fleet-agent watch  --config fleet.toml --mapping MAP.toml DIR [--settle-seconds 5]
                       [--poll-seconds 1] [--once] [--journal PATH]

The platform's address and API key come from the agent's TOML (`--config`); the job, the
format and its options from the mapping. Exit status: 0 done, 1 the platform refused the
batch or stayed unreachable (the journal keeps what was done: run again to resume), 2 a bad
configuration, mapping or command line, 3 done but some recordings failed (listed), 130
interrupted (Ctrl-C) during an import.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading

from fleet_agent.client import ApiClient, RetryPolicy
from fleet_agent.config import ConfigError, load_config
from fleet_agent.importers.journal import Journal, JournalBusy, JournalMismatch, default_path
from fleet_agent.importers.mapping import MappingError, load_mapping
from fleet_agent.importers.pipeline import ImportStopped, ImportSummary, import_recordings
from fleet_agent.importers.progress import TerminalProgress
from fleet_agent.importers.watch import watch_folder


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fleet-agent", description="Import a fleet's own recordings into a job."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("import", help="import every finished recording of SOURCE")
    run.add_argument("source", metavar="SOURCE", help="a folder or file, as the format reads")
    watch = commands.add_parser("watch", help="import recordings as they appear in DIR")
    watch.add_argument("source", metavar="DIR", help="the folder the recorder writes to")
    watch.add_argument(
        "--settle-seconds",
        type=float,
        default=5.0,
        help="a file is finished once unchanged this long (5)",
    )
    watch.add_argument("--poll-seconds", type=float, default=1.0, help="list DIR this often (1)")
    watch.add_argument("--once", action="store_true", help="one pass once DIR settles, then exit")
    for sub in (run, watch):
        sub.add_argument("--config", required=True, help="the fleet agent's TOML (platform, key)")
        sub.add_argument("--mapping", required=True, help="the mapping TOML (job, format, ...)")
        sub.add_argument("--journal", default=None, help="the job's journal (default: state dir)")
        sub.add_argument("--retries", type=int, default=6, help="tries per request (6)")
        sub.add_argument("--json", action="store_true", help="print the summary as JSON too")
        sub.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (WARNING)")
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.retries < 1:
        parser.error("--retries must be at least 1")
    if args.command == "watch" and (args.settle_seconds < 0 or args.poll_seconds <= 0):
        parser.error("--settle-seconds must be >= 0 and --poll-seconds > 0")
    try:
        config = load_config(args.config)
        mapping = load_mapping(args.mapping)
    except (ConfigError, MappingError) as exc:
        print(f"fleet-agent: {exc}", file=sys.stderr)
        return 2
    client = ApiClient(config.base_url, config.api_key, retry=RetryPolicy(attempts=args.retries))
    progress = TerminalProgress()
    try:
        with Journal.open(args.journal or default_path(mapping.job), mapping.job) as journal:
            summary = _run(args, client, mapping, journal, progress)
    except (JournalBusy, JournalMismatch) as exc:
        print(f"fleet-agent: {exc}", file=sys.stderr)
        return 2
    except MappingError as exc:  # what the mapping names does not fit the job
        print(f"fleet-agent: {args.mapping}: {exc}", file=sys.stderr)
        return 2
    except ImportStopped as exc:
        print(f"fleet-agent: stopped: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the journal has every step done: the next run resumes
        print("fleet-agent: interrupted; run it again to resume", file=sys.stderr)
        return 130
    finally:
        client.close()
    progress.print(f"{args.command}: {summary.line()}")
    for error in summary.errors:
        print(f"fleet-agent: {error}", file=sys.stderr)
    if args.json:
        print(json.dumps(summary.as_dict(), indent=2))
    return 3 if summary.count("failed") or summary.errors else 0


def _run(args, client, mapping, journal, progress) -> ImportSummary:
    if args.command == "import":
        return import_recordings(client, mapping, args.source, journal, progress)
    stop = threading.Event()

    def halt(signum, frame):
        progress.print(f"signal {signum}: stopping after this pass")
        stop.set()

    signal.signal(signal.SIGINT, halt)
    signal.signal(signal.SIGTERM, halt)
    return watch_folder(
        client,
        mapping,
        args.source,
        journal,
        settle_seconds=args.settle_seconds,
        poll_seconds=args.poll_seconds,
        once=args.once,
        stop=stop,
        progress=progress,
    )
