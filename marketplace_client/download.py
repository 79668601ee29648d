"""`marketplace-download <delivery id>`: a whole delivered dataset onto this machine.

Every file goes through the platform's audited links: `POST /api/v1/deliveries/<id>/links`
signs up to 500 files per request (each recorded as a download; the links are valid for
minutes), fetched ahead in batches while the files download (marketplace_client/links.py);
the bytes then come straight from storage, each worker thread over its own kept-alive
connection. The command

- fetches `manifest.json` first and then every file it lists, several at a time;
- refuses a manifest that lists a path outside the target folder (absolute, `..`, through a
  symbolic link), a path twice, a path that is both a file and a folder, `manifest.json`
  itself, or anything in the command's own folder `.marketplace-download/`: nothing is
  fetched then;
- keeps its own files in `.marketplace-download/` in the target folder, a name no manifest
  entry may take: the journal (`journal.jsonl`: size, SHA-256 and modification time of each
  verified file, so a finished file is not fetched again) and the partial files
  (`parts/`: a file cut off continues from where it stopped with an HTTP Range request);
- reads no body past the size the manifest gives (the listing's, for the manifest): one
  byte more fails that file at once, its partial file discarded, not tried again;
- verifies each file's size and SHA-256 against the manifest before moving it into place
  (a mismatch is fetched once more from scratch, then reported);
- asks for a fresh link when a signed one has expired (in the book, or refused by storage);
- prints where the dataset is and how to load it (`LeRobotDataset(repo_id, root=...)`).

Exit status: 0 every file verified, 1 the platform or storage refused or a file stayed wrong,
2 a bad command line.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from marketplace_client.http import (
    ApiClient,
    ApiError,
    BodyOverrun,
    RetryPolicy,
    Streamed,
    TransientError,
)
from marketplace_client.links import LinkBook, links_requester

log = logging.getLogger("marketplace_client.download")

USER_AGENT = "marketplace-download/0.1"
MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 64 * 2**20  # ~400,000 entries
# The command's own files, in a folder of the target that no manifest entry may name.
CLIENT_FOLDER = ".marketplace-download"
JOURNAL = f"{CLIENT_FOLDER}/journal.jsonl"
PARTS = f"{CLIENT_FOLDER}/parts"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class DownloadFailed(Exception):
    pass


class Refused(DownloadFailed):
    """A file (or a manifest) the command will not take: not tried again."""


def part_path(root: Path, relative: str) -> Path:
    """Where the file `relative` is written until it is verified (resumed from there)."""
    name = hashlib.sha256(relative.encode()).hexdigest()[:40]
    return Path(root) / PARTS / f"{name}.part"


@dataclass
class FileEntry:
    path: str
    size: int
    sha256: str


@dataclass
class Summary:
    delivery: str
    root: Path
    files: int = 0
    fetched: int = 0
    skipped: int = 0
    resumed: int = 0
    bytes_fetched: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {
            "delivery": self.delivery,
            "root": str(self.root),
            "files": self.files,
            "fetched": self.fetched,
            "skipped": self.skipped,
            "resumed": self.resumed,
            "bytes_fetched": self.bytes_fetched,
            "seconds": round(self.seconds, 3),
            "failures": self.failures,
        }


def safe_target(root: Path, relative: str) -> Path:
    """Where a manifest path goes under root; refuses absolute paths and '..' escapes."""
    return Targets(root)(relative)


class Targets:
    """Where each manifest path goes under root. A path must be relative and without '..';
    its folder is resolved (symbolic links followed) once per folder, not once per file, and
    must stay inside root."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self._folders: dict[PurePosixPath, Path] = {}

    def __call__(self, relative: str) -> Path:
        pure = PurePosixPath(relative)
        if pure.is_absolute() or ".." in pure.parts or not pure.name or "\x00" in relative:
            raise DownloadFailed(f"Refusing a path outside the target folder: {relative!r}")
        if pure.parts[0].casefold() == CLIENT_FOLDER:
            raise Refused(f"Refusing {relative!r}: {CLIENT_FOLDER}/ holds this command's files")
        folder = self._folders.get(pure.parent)
        if folder is None:
            folder = (self.root / pure.parent).resolve()
            if not folder.is_relative_to(self.root):
                raise DownloadFailed(f"Refusing a path outside the target folder: {relative!r}")
            self._folders[pure.parent] = folder
        return folder / pure.name


def manifest_entries(manifest, targets: Targets) -> list[FileEntry]:
    """The manifest's files, each with a size and a SHA-256, each inside the target folder
    (`targets`), none twice (letter case aside), none both a file and a folder, none
    `manifest.json`; Refused naming the first entry that is not."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, list):
        raise Refused("manifest.json has no list of files.")
    entries, seen, folders = [], {}, set()
    for item in files:
        try:
            entry = FileEntry(str(item["path"]), int(item["size"]), str(item["sha256"]))
        except (TypeError, KeyError, ValueError):
            raise Refused(f"manifest.json: a malformed entry {str(item)[:200]!r}") from None
        if entry.size < 0 or not SHA256_HEX.fullmatch(entry.sha256):
            raise Refused(f"manifest.json: {entry.path!r} needs a size and a SHA-256.")
        targets(entry.path)
        key = PurePosixPath(entry.path).as_posix().casefold()
        if key == MANIFEST:
            raise Refused(f"manifest.json lists {entry.path!r}: the manifest itself.")
        if key in seen:
            raise Refused(f"manifest.json lists {entry.path!r} and {seen[key]!r}: one file.")
        seen[key] = entry.path
        folders.update(parent.as_posix() for parent in PurePosixPath(key).parents)
        entries.append(entry)
    both = sorted(set(seen) & folders)
    if both:
        raise Refused(f"manifest.json lists {seen[both[0]]!r} as a file and as a folder.")
    return entries


class StateFile:
    """What was verified already: {path: {"size", "sha256", "mtime_ns"}}, kept as an
    append-only journal (one JSON line per verified file, written to the file at most
    FLUSH_SECONDS after), so a kill at any moment loses at most the files in flight and those
    verified in its last FLUSH_SECONDS (fetched again on resume; never a file marked verified
    that is not), and the cost stays one line per file, not a system call per file."""

    FLUSH_SECONDS = 0.2

    def __init__(self, root: Path):
        self.path = Path(root) / JOURNAL
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        self.entries: dict[str, dict] = {}
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError):
            text = ""
        lines = text.splitlines()
        # a line cut off by a kill must not swallow the first line appended now
        self.cut_off = bool(text) and not text.endswith("\n")
        for line in lines:
            try:
                record = json.loads(line)
                self.entries[record["path"]] = record
            except (ValueError, KeyError, TypeError):
                continue  # a line cut off by a kill
        self.journal = None
        self.flushed = 0.0

    def verified(self, entry: FileEntry, target: Path) -> bool:
        known = self.entries.get(entry.path)
        try:
            stat = target.stat()
        except OSError:
            return False
        return (
            isinstance(known, dict)
            and known.get("sha256") == entry.sha256
            and known.get("size") == entry.size == stat.st_size
            and known.get("mtime_ns") == stat.st_mtime_ns
        )

    def record(self, entry: FileEntry, mtime_ns: int) -> None:
        record = {
            "path": entry.path,
            "size": entry.size,
            "sha256": entry.sha256,
            "mtime_ns": mtime_ns,
        }
        line = json.dumps(record) + "\n"
        with self.lock:
            self.entries[entry.path] = record
            if self.journal is None:
                self.journal = open(self.path, "a")  # noqa: SIM115 (closed by close())
                if self.cut_off:
                    self.journal.write("\n")
            self.journal.write(line)
            now = time.monotonic()
            if now - self.flushed >= self.FLUSH_SECONDS:
                self.journal.flush()
                self.flushed = now

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()


class Progress:
    """A line on stderr at most every `interval` seconds: files and bytes done."""

    def __init__(self, total_files: int, total_bytes: int, quiet: bool, interval: float = 1.0):
        self.total_files, self.total_bytes = total_files, total_bytes
        self.files = 0
        self.bytes = 0
        self.quiet = quiet
        self.interval = interval
        self.lock = threading.Lock()
        self.last = 0.0

    def add_bytes(self, count: int) -> None:
        with self.lock:
            self.bytes += count
        self._maybe_print()

    def add_file(self, size_if_skipped: int = 0) -> None:
        with self.lock:
            self.files += 1
            self.bytes += size_if_skipped
        self._maybe_print()

    def _maybe_print(self, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        print(
            f"  {self.files}/{self.total_files} files, "
            f"{self.bytes / 1e6:.1f}/{self.total_bytes / 1e6:.1f} MB",
            file=sys.stderr,
            flush=True,
        )

    def done(self) -> None:
        self._maybe_print(force=True)


class DeliveryDownloader:
    def __init__(
        self,
        client: ApiClient,
        delivery_id: str,
        root: Path,
        *,
        workers: int = 8,
        quiet: bool = False,
    ):
        self.client = client
        self.delivery_id = delivery_id
        self.root = Path(root)
        self.workers = max(1, workers)
        self.quiet = quiet
        self._request_links = links_requester(client, delivery_id)
        self.links = LinkBook(self._request_links)
        self._made_dirs: set[Path] = set()
        self.target = Targets(self.root)

    def _link(self, path: str) -> str:
        return self.links.url(path)

    def _fetch(
        self, entry: FileEntry, target: Path, progress: Progress | None
    ) -> tuple[Streamed, bool]:
        """Fetch one file into its part file (resuming) and return what arrived, resumed;
        Refused (the part discarded) when the body runs past the manifest's size."""
        if target.parent not in self._made_dirs:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._made_dirs.add(target.parent)
        part = part_path(self.root, entry.path)
        try:
            held = part.stat().st_size
        except OSError:
            held = 0
        if held > entry.size >= 0:
            part.unlink()  # longer than the file can be: start again
            held = 0
        resumed = held > 0
        for link_try in range(3):
            url = self._link(entry.path)
            try:
                streamed = self.client.stream_to(
                    url,
                    part,
                    resume=resumed,
                    progress=progress.add_bytes if progress else None,
                    limit=entry.size,
                )
            except BodyOverrun as exc:
                part.unlink(missing_ok=True)
                raise Refused(f"{entry.path}: {exc}; the partial file was discarded") from None
            except ApiError as exc:
                # A signed link that expired (403) between issue and use: ask for a new one.
                if exc.status == 403 and link_try < 2:
                    continue
                raise
            return streamed, resumed
        raise DownloadFailed(f"{entry.path}: storage kept refusing fresh links")

    def _place(self, entry: FileEntry, state: StateFile | None, progress: Progress | None) -> str:
        """Fetch, verify and move one file into place; returns 'fetched' or 'resumed'."""
        target = self.target(entry.path)
        part = part_path(self.root, entry.path)
        outcome = "fetched"
        for verify_try in range(2):
            streamed, resumed = self._fetch(entry, target, progress)
            if resumed and verify_try == 0:
                outcome = "resumed"
            size, digest = streamed.size, streamed.sha256
            if size == entry.size and (not entry.sha256 or digest == entry.sha256):
                os.replace(part, target)  # (a rename keeps the modification time)
                if state is not None:
                    state.record(entry, streamed.mtime_ns)
                return outcome
            log.warning(
                "%s: got %d bytes with SHA-256 %s, the manifest says %d bytes and %s",
                entry.path,
                size,
                digest,
                entry.size,
                entry.sha256,
            )
            part.unlink(missing_ok=True)
        raise DownloadFailed(f"{entry.path}: size or SHA-256 differs from the manifest")

    def _manifest(self) -> tuple[dict, FileEntry]:
        first = self._request_links([MANIFEST])  # 404 when the delivery lists no manifest
        self.links.put(first)
        entry = FileEntry(MANIFEST, first[MANIFEST].size, "")
        if not 0 <= entry.size <= MANIFEST_MAX_BYTES:
            raise Refused(f"manifest.json of {entry.size} bytes: more than a manifest holds.")
        target = self.target(MANIFEST)
        part = part_path(self.root, MANIFEST)
        part.unlink(missing_ok=True)  # the manifest is small: always fetched afresh
        streamed, _ = self._fetch(entry, target, None)
        if streamed.size != entry.size:
            raise DownloadFailed("manifest.json's size differs from the delivery's listing.")
        try:
            manifest = json.loads(part.read_bytes())
        except ValueError as exc:
            raise Refused(f"manifest.json is not JSON ({exc}).") from None
        os.replace(part, target)
        return manifest, entry

    def run(self) -> Summary:
        started = time.monotonic()
        (self.root / PARTS).mkdir(parents=True, exist_ok=True)
        self.target = Targets(self.root)
        summary = Summary(delivery=self.delivery_id, root=self.root.resolve())
        manifest, _ = self._manifest()
        entries = manifest_entries(manifest, self.target)
        summary.files = len(entries) + 1
        state = StateFile(self.root)
        todo = []
        for entry in entries:
            if state.verified(entry, self.target(entry.path)):
                summary.skipped += 1
            else:
                todo.append(entry)
        progress = Progress(len(entries), sum(e.size for e in entries), self.quiet)
        for _ in range(summary.skipped):
            progress.add_file()
        progress.bytes = sum(e.size for e in entries) - sum(e.size for e in todo)
        # Biggest first: the long transfers start at once and small files fill the gaps.
        todo.sort(key=lambda e: -e.size)
        self.links.queue(entry.path for entry in todo)  # signed ahead in this order
        try:
            self._download(todo, state, progress, summary)
        finally:
            self.links.close()
            state.close()
        progress.done()
        summary.seconds = time.monotonic() - started
        return summary

    def _download(
        self, todo: list[FileEntry], state: StateFile, progress: Progress, summary: Summary
    ) -> None:
        def work(entry: FileEntry) -> str:
            try:
                return self._place(entry, state, progress)
            finally:
                progress.add_file()

        failed: list[tuple[FileEntry, Exception]] = []
        with ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = {pool.submit(work, entry): entry for entry in todo}
            for future in as_completed(futures):
                entry = futures[future]
                try:
                    outcome = future.result()
                except Refused as exc:  # a body past its size: not asked for again
                    summary.failures.append(str(exc))
                    continue
                except (ApiError, TransientError, DownloadFailed, OSError) as exc:
                    failed.append((entry, exc))
                    continue
                self._count(summary, entry, outcome)
        # A file that failed (a transfer cut short past its retries, a link refused) is tried
        # once more on its own before it is reported; what it brings is verified all the same.
        for entry, first_error in failed:
            log.info("%s: %s; trying it once more", entry.path, first_error)
            try:
                outcome = self._place(entry, state, None)
            except (ApiError, TransientError, DownloadFailed, OSError) as exc:
                summary.failures.append(f"{entry.path}: {exc}")
                continue
            self._count(summary, entry, outcome)

    @staticmethod
    def _count(summary: Summary, entry: FileEntry, outcome: str) -> None:
        summary.fetched += 1
        summary.bytes_fetched += entry.size
        if outcome == "resumed":
            summary.resumed += 1


def repo_id_for(delivery_id: str) -> str:
    return f"marketplace/{delivery_id}"


def loading_snippet(delivery_id: str, root: Path) -> str:
    return (
        "from lerobot.datasets.lerobot_dataset import LeRobotDataset\n"
        f'dataset = LeRobotDataset("{repo_id_for(delivery_id)}", root="{root}")'
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="marketplace-download",
        description=(
            "Download a delivered dataset: every file through the audited, signed links, "
            "resumable, verified against manifest.json."
        ),
    )
    parser.add_argument("delivery", help="the delivery's id (shown on the order page)")
    parser.add_argument(
        "--dest",
        default=None,
        help="target folder (default: ./marketplace-datasets/<delivery id>)",
    )
    parser.add_argument(
        "--base-url",
        default=os.environ.get("MARKETPLACE_URL", "http://127.0.0.1:8000"),
        help="the platform's address (default: $MARKETPLACE_URL or http://127.0.0.1:8000)",
    )
    parser.add_argument(
        "--api-key-env",
        default="MARKETPLACE_API_KEY",
        help="environment variable holding your API key (default: MARKETPLACE_API_KEY)",
    )
    parser.add_argument("--workers", type=int, default=8, help="files fetched at once (8)")
    parser.add_argument("--retries", type=int, default=6, help="tries per request (6)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    api_key = os.environ.get(args.api_key_env, "")
    if not api_key:
        print(f"Set your API key in ${args.api_key_env}.", file=sys.stderr)
        return 2
    if args.workers < 1 or args.workers > 64:
        print("--workers must be between 1 and 64.", file=sys.stderr)
        return 2
    root = Path(args.dest or Path("marketplace-datasets") / args.delivery)
    try:
        client = ApiClient(
            args.base_url,
            api_key,
            retry=RetryPolicy(attempts=max(1, args.retries)),
            user_agent=USER_AGENT,
        )
    except ValueError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"Downloading delivery {args.delivery} into {root.resolve()}", file=sys.stderr)
    try:
        summary = DeliveryDownloader(
            client, args.delivery, root, workers=args.workers, quiet=args.quiet
        ).run()
    except (ApiError, TransientError, DownloadFailed, OSError) as exc:
        print(f"Download failed: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary.as_dict()))
    if summary.failures:
        print(
            f"{len(summary.failures)} file(s) failed; run the same command again to resume.",
            file=sys.stderr,
        )
        return 1
    print(
        f"All {summary.files} files verified against manifest.json in {summary.root}\n"
        f"Load it with:\n{loading_snippet(args.delivery, summary.root)}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
