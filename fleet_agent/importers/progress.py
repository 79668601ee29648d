"""What `fleet-agent import` and `watch` print: one status line per recording and a summary
at the end, and, only when the output is a terminal, a progress bar of the recording being
uploaded (standard library; redrawn in place with a carriage return)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 30


class TerminalProgress:
    """A `Progress` callback for `import_recordings`: `TerminalProgress()(event, info)`."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self._source_id = ""
        self._total = 0
        self._done = 0
        self._drawn = False
        self._last_draw = 0.0

    def __call__(self, event: str, info: dict) -> None:
        if event == "begin":
            self._source_id, self._total, self._done = info["source_id"], info["bytes"], 0
            self._draw(force=True)
        elif event == "sent":
            self._done += info["bytes"]
            self._draw(force=self._done >= self._total)
        elif event == "done":
            self.print(info["outcome"].line())
        elif event == "error":
            self.print(f"error    {info['message']}")

    def print(self, line: str) -> None:
        self._clear()
        self.stream.write(line + "\n")
        self.stream.flush()

    def bar(self) -> str:
        share = self._done / self._total if self._total else 1.0
        filled = round(BAR_WIDTH * share)
        return (
            f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {share:4.0%} {self._source_id}"
            f" {self._done / 2**20:.1f}/{self._total / 2**20:.1f} MiB"
        )

    def _draw(self, *, force: bool) -> None:
        now = time.monotonic()
        if not self.tty or (not force and now - self._last_draw < 0.1):
            return
        self._last_draw = now
        self.stream.write("\r" + self.bar())
        self.stream.flush()
        self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r" + " " * (BAR_WIDTH + 60) + "\r")
            self._drawn = False
