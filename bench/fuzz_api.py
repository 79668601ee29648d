"""The long API fuzzing run: schemathesis over every operation of /api/schema/, as every role.

    python bench/fuzz_api.py [--max-examples 100]

Runs tests/security/test_api_fuzz.py (the same world, callers and checks as CI, which uses 12
cases per operation) with more generated cases per operation, against PostgreSQL
(BENCH_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/marketplace_fuzz; pytest-django
makes and drops test_<name>) and the local S3 server on loopback. Prints requests sent, 5xx
responses, schema violations (distinct findings), wall time, and every finding. Bounded: cases
per operation x operations x 5 callers requests, in process, nothing listens but local S3.
Exit status 1 if anything was found.
"""

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--max-examples", type=int, default=100, help="cases per operation")
    args = parser.parse_args()

    env = {
        **os.environ,
        "DATABASE_URL": os.environ.get(
            "BENCH_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/marketplace_fuzz"
        ),
        "FUZZ_MAX_EXAMPLES": str(args.max_examples),
    }
    started = time.monotonic()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/security/test_api_fuzz.py::test_every_operation_survives_fuzzing_as_every_role",
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "--timeout=3600",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - started
    summary = re.search(r"^fuzz: .*$", run.stdout, re.MULTILINE)
    if summary is None:
        print(run.stdout[-5000:], run.stderr[-5000:], sep="\n")
        print("fuzz_api: the run printed no summary", file=sys.stderr)
        return 2
    print(f"max examples per operation: {args.max_examples}")
    print(summary.group(0))
    print(f"wall time (with database setup): {wall:.1f} s")
    findings = [line for line in run.stdout.splitlines() if re.match(r"^E?\s*- \S+ /", line)]
    for line in findings:
        print(line.removeprefix("E").strip())
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
