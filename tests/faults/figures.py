"""The fault tests' figures (recovery time, tasks published / completed / duplicated), one
record per test, printed at the end of the run and written as JSON to $FAULT_REPORT_JSON.

Under pytest-xdist each worker process records its own tests: at the end of its session a
worker hands its records to the controller (`workeroutput`), which prints and writes them
all (hooks in tests/conftest.py, the one conftest the controller loads)."""

import json
import os
from pathlib import Path

FIGURES: list[dict] = []
WORKER_OUTPUT_KEY = "fault_figures"


def hand_over(config) -> None:
    """In an xdist worker: pass this worker's records to the controller (as JSON text)."""
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_OUTPUT_KEY] = json.dumps(FIGURES, default=str)


def take_over(node) -> None:
    """In the xdist controller: keep the records a finished worker handed over."""
    FIGURES.extend(json.loads(node.workeroutput.get(WORKER_OUTPUT_KEY, "[]")))


def report(terminalreporter) -> None:
    if not FIGURES or hasattr(terminalreporter.config, "workeroutput"):
        return  # nothing recorded, or a worker (the controller reports)
    records = sorted(FIGURES, key=lambda record: record["test"])
    terminalreporter.section("fault figures")
    for record in records:
        details = ", ".join(f"{k}={v}" for k, v in record.items() if k != "test")
        terminalreporter.write_line(f"{record['test']}: {details}")
    if os.environ.get("FAULT_REPORT_JSON"):
        Path(os.environ["FAULT_REPORT_JSON"]).write_text(json.dumps(records, indent=2, default=str))
