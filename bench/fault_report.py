"""Run the fault tests (tests/faults) and print, per fault, how long recovery took and what
was published, completed and duplicated.

    python bench/fault_report.py [--json out.json]

Needs what the tests need: PostgreSQL (FAULT_DATABASE_URL, default
postgres://postgres@127.0.0.1:5432/marketplace_faults; pytest-django creates test_<name>),
RabbitMQ on 127.0.0.1:5672 (a vhost per run; the restart test starts a private node of its
own and never touches the shared one), node (local S3 server) and localstripe.
Takes ~5 minutes on 2 cores; every test is bounded (< 60 s of waiting each).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COUNTS = ("published", "completed", "duplicated")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "faults.json"
        env = {
            **os.environ,
            "FAULT_REPORT_JSON": str(out),
            "DATABASE_URL": os.environ.get(
                "FAULT_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/marketplace_faults"
            ),
        }
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/faults", "-q", "-p", "no:cacheprovider"],
            cwd=ROOT,
            env=env,
            check=False,
        )
        figures = json.loads(out.read_text()) if out.exists() else []
    print()
    print(f"{'fault test':<86} {'recovery s':>10}  published/completed/duplicated  other")
    for record in figures:
        recovery = record.get("recovery_s", record.get("seconds", record.get("completed_s", "")))
        counts = "/".join(str(record.get(key, "-")) for key in COUNTS)
        other = ", ".join(
            f"{k}={v}"
            for k, v in record.items()
            if k not in {"test", "recovery_s", "seconds", "completed_s", *COUNTS}
        )
        print(f"{record['test']:<86} {recovery!s:>10}  {counts:^30}  {other}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
