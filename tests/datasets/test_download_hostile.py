"""The download command against a hostile server (issue 28, item 8): a real threaded HTTP
server on 127.0.0.1 plays both the platform's link endpoint and storage, and sends endless
bodies (close-delimited and chunked), lengths other than the manifest's, and manifests whose
entries collide with the command's own files or leave the target folder.

The command writes only what the manifest promises: a body is read up to the manifest's size
and one byte more fails the file at once (nothing past the size is written, the partial
file is discarded, the file is not asked for again); a manifest naming the command's folder
(journal, partial files), the manifest itself, a path twice or as a file and a folder, or a
path out of the target is refused before any file is fetched, and the journal is untouched.
"""

import hashlib
import json
import threading
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest

from marketplace_client.download import (
    JOURNAL,
    DeliveryDownloader,
    DownloadFailed,
    main,
    part_path,
)
from marketplace_client.http import ApiClient, BodyOverrun, RetryPolicy

CAP = 50 * 2**20  # an "endless" body stops here (what the issue saw written, three times)
PIECE = bytes(64 * 1024)


def entry(path: str, data: bytes) -> dict:
    return {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


class HostileServer:
    """POST /api/v1/deliveries/<id>/links answers a link per path asked; GET /files/<path>
    answers per `modes[path]`: honest (Range honoured), endless (close-delimited), chunked
    (endless chunks), long (Content-Length 50 MiB), short (a Content-Length 3 bytes short,
    and that body). Counts GETs and bytes sent per path."""

    def __init__(self, files: dict[str, bytes], *, manifest: dict | None = None, modes=None):
        self.files = files
        self.modes = modes or {}
        listed = manifest or {"files": [entry(p, d) for p, d in sorted(files.items())]}
        self.manifest = json.dumps(listed).encode()
        self.sizes = {item["path"]: item["size"] for item in listed["files"]}
        self.gets: list[str] = []
        self.sent: dict[str, int] = {}
        self.answered = defaultdict(threading.Event)  # path -> set when an answer ended
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return None

            def do_POST(self):
                asked = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                links = [server.link(path) for path in asked["paths"]]
                body = json.dumps({"expires_in": 300, "links": links}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                server.serve(self, unquote(self.path.removeprefix("/files/")))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def link(self, path: str) -> dict:
        size = len(self.manifest) if path == "manifest.json" else self.sizes[path]
        return {"path": path, "url": f"{self.url}/files/{path}", "size_bytes": size}

    def serve(self, handler, path: str) -> None:
        data = self.manifest if path == "manifest.json" else self.files[path]
        mode = self.modes.get(path, "honest")
        with self.lock:
            self.gets.append(path)
        start = 0
        if handler.headers.get("Range") and mode == "honest":
            start = int(handler.headers["Range"].removeprefix("bytes=").removesuffix("-"))
        handler.send_response(206 if start else 200)
        if mode == "honest":
            handler.send_header("Content-Length", str(len(data) - start))
        elif mode == "long":
            handler.send_header("Content-Length", str(CAP))
        elif mode == "short":
            handler.send_header("Content-Length", str(len(data) - 3))
            data = data[:-3]
        elif mode == "chunked":
            handler.send_header("Transfer-Encoding", "chunked")
        else:  # endless: the body ends when the connection does
            handler.send_header("Connection", "close")
            handler.close_connection = True
        handler.end_headers()
        self._write(handler, path, data[start:], mode)

    def _write(self, handler, path: str, data: bytes, mode: str) -> None:
        chunked = mode == "chunked"
        endless = mode in ("endless", "chunked", "long")
        pieces = [data] + ([PIECE] * (CAP // len(PIECE)) if endless else [])
        try:
            for piece in pieces:
                framed = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
                handler.wfile.write(framed)
                with self.lock:
                    self.sent[path] = self.sent.get(path, 0) + len(piece)
        except OSError:
            handler.close_connection = True  # the client hung up, as it should
        finally:
            with self.lock:
                self.answered[path].set()

    def sent_when_answered(self, path: str) -> int:
        """The bytes of `path` the server got out, once its answer ended."""
        with self.lock:
            answered = self.answered[path]
        assert answered.wait(timeout=30), "the server is still sending"
        return self.sent.get(path, 0)


@pytest.fixture
def hostile():
    servers = []

    def start(files, **options):
        servers.append(HostileServer(files, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def client_for(server) -> ApiClient:
    return ApiClient(server.url, "k", retry=RetryPolicy(attempts=2), sleep=lambda _: None)


@pytest.mark.parametrize("mode", ["endless", "chunked", "long"])
@pytest.mark.parametrize("held", [0, 3])  # a fresh file, and one resumed after 3 bytes
def test_a_body_is_never_written_past_the_size_expected(hostile, tmp_path, mode, held):
    server = hostile({"six.bin": b"abcdef"}, modes={"six.bin": mode})
    path = tmp_path / "six.part"
    path.write_bytes(b"abc"[:held])

    with pytest.raises(BodyOverrun):
        client_for(server).stream_to(f"{server.url}/files/six.bin", path, resume=True, limit=6)

    assert path.stat().st_size <= 6  # +0: the byte that shows the overrun is not written
    if mode == "long":  # refused on its promise: not a byte read
        assert path.stat().st_size == held
    assert server.sent_when_answered("six.bin") < CAP  # the client hung up: the rest unsent


@pytest.mark.parametrize("mode", ["endless", "chunked", "long"])
def test_a_file_whose_body_runs_past_the_manifest_is_failed_discarded_and_not_retried(
    hostile, tmp_path, mode
):
    files = {"data/six.bin": b"abcdef", "data/good.bin": b"good bytes"}
    server = hostile(files, modes={"data/six.bin": mode})

    summary = DeliveryDownloader(client_for(server), "d1", tmp_path, quiet=True).run()

    assert summary.failures == [
        f"data/six.bin: {'the answer promises' if mode == 'long' else 'more than the 6'}"
        + (" 52428800 bytes of 6" if mode == "long" else " bytes expected arrived")
        + "; the partial file was discarded"
    ]
    assert server.gets.count("data/six.bin") == 1  # not asked for again
    assert not (tmp_path / "data/six.bin").exists()
    assert not part_path(tmp_path, "data/six.bin").exists()
    assert (tmp_path / "data/good.bin").read_bytes() == b"good bytes"
    assert server.sent_when_answered("data/six.bin") < CAP


def test_the_command_exits_1_on_an_endless_body(hostile, tmp_path, monkeypatch, capsys):
    server = hostile({"six.bin": b"abcdef"}, modes={"six.bin": "endless"})
    monkeypatch.setenv("MARKETPLACE_API_KEY", "k")
    dest = tmp_path / "dataset"
    assert main(["d1", "--dest", str(dest), "--base-url", server.url, "--quiet"]) == 1
    printed = capsys.readouterr()
    assert json.loads(printed.out)["failures"] == [
        "six.bin: more than the 6 bytes expected arrived; the partial file was discarded"
    ]
    assert "1 file(s) failed" in printed.err
    assert not (dest / "six.bin").exists()


def test_a_manifest_body_past_its_listed_size_stops_the_download(hostile, tmp_path):
    server = hostile({"a.bin": b"a"}, modes={"manifest.json": "endless"})
    with pytest.raises(DownloadFailed, match=r"more than the \d+ bytes expected arrived"):
        DeliveryDownloader(client_for(server), "d1", tmp_path, quiet=True).run()
    assert server.gets == ["manifest.json"] and not (tmp_path / "manifest.json").exists()


def test_a_body_shorter_than_the_manifest_is_fetched_again_then_reported(hostile, tmp_path):
    server = hostile({"six.bin": b"abcdef"}, modes={"six.bin": "short"})
    summary = DeliveryDownloader(client_for(server), "d1", tmp_path, quiet=True).run()
    assert summary.failures == ["six.bin: six.bin: size or SHA-256 differs from the manifest"]
    assert server.gets.count("six.bin") == 4  # verified twice, then once more on its own
    assert not (tmp_path / "six.bin").exists()


COLLIDING = [
    (".marketplace-download/journal.jsonl", "holds this command's files"),
    (".Marketplace-Download/parts/x.part", "holds this command's files"),
    ("manifest.json", "the manifest itself"),
    ("./manifest.json", "the manifest itself"),
    ("../outside.bin", "outside the target folder"),
    ("/etc/passwd", "outside the target folder"),
    ("data/../../outside.bin", "outside the target folder"),
    ("linked/x.bin", "outside the target folder"),
]


@pytest.mark.parametrize(("name", "refused"), COLLIDING)
def test_a_manifest_naming_the_commands_files_or_a_path_out_is_refused(
    hostile, tmp_path, name, refused
):
    dest, outside = tmp_path / "dataset", tmp_path / "outside"
    outside.mkdir()
    (dest / JOURNAL).parent.mkdir(parents=True)
    (dest / "linked").symlink_to(outside, target_is_directory=True)
    journal = '{"path": "kept.bin", "size": 4, "sha256": "' + "0" * 64 + '", "mtime_ns": 1}\n'
    (dest / JOURNAL).write_text(journal)
    files = {"good.bin": b"good", name: b"hostile bytes"}
    server = hostile(files)

    with pytest.raises(DownloadFailed, match=refused):
        DeliveryDownloader(client_for(server), "d1", dest, quiet=True).run()

    assert server.gets == ["manifest.json"]  # not one file fetched
    assert (dest / JOURNAL).read_text() == journal
    assert list(outside.iterdir()) == [] and not (tmp_path / "outside.bin").exists()


@pytest.mark.parametrize(
    ("paths", "refused"),
    [
        (["data/a.bin", "data/a.bin"], "lists 'data/a.bin' and 'data/a.bin': one file"),
        (["data/A.bin", "data/a.bin"], "lists 'data/a.bin' and 'data/A.bin': one file"),
        (["data", "data/a.bin"], "lists 'data' as a file and as a folder"),
    ],
)
def test_a_manifest_listing_one_file_twice_or_a_file_as_a_folder_is_refused(
    hostile, tmp_path, paths, refused
):
    files = {path: path.encode() for path in paths}
    manifest = {"files": [entry(path, path.encode()) for path in paths]}
    server = hostile(files, manifest=manifest)
    with pytest.raises(DownloadFailed, match=refused):
        DeliveryDownloader(client_for(server), "d1", tmp_path, quiet=True).run()
    assert server.gets == ["manifest.json"]


def test_the_journal_lives_where_no_manifest_entry_can_be(hostile, tmp_path):
    # the name the journal had: now an ordinary file of the dataset
    files = {".marketplace-download.json": b'{"path": "a.bin"}\n', "a.bin": b"a" * 100}
    server = hostile(files)

    first = DeliveryDownloader(client_for(server), "d1", tmp_path, quiet=True).run()
    again = DeliveryDownloader(client_for(server), "d1", tmp_path, quiet=True).run()

    assert first.failures == [] and first.fetched == 2
    assert (tmp_path / ".marketplace-download.json").read_bytes() == files[
        ".marketplace-download.json"
    ]
    assert again.skipped == 2 and again.fetched == 0  # the journal was not overwritten
    recorded = [json.loads(line)["path"] for line in (tmp_path / JOURNAL).read_text().splitlines()]
    assert sorted(recorded) == [".marketplace-download.json", "a.bin"]
