"""The download command's pieces without a server: LinkBook (links fetched ahead in batches,
each handed out once) and Targets (where a manifest path may be written)."""

import threading
import time

import pytest

from marketplace_client.download import DownloadFailed, Targets
from marketplace_client.http import ApiError
from marketplace_client.links import Link, LinkBook


class FakePlatform:
    """Stands in for POST /deliveries/<id>/links: records every batch asked for."""

    def __init__(self, clock, lifetime=300.0, refuse_after=None, delay=0.0):
        self.clock = clock
        self.lifetime = lifetime
        self.refuse_after = refuse_after
        self.delay = delay
        self.batches: list[list[str]] = []
        self.signed = 0
        self.lock = threading.Lock()

    def __call__(self, paths):
        with self.lock:
            self.batches.append(list(paths))
            if self.refuse_after is not None and len(self.batches) > self.refuse_after:
                raise ApiError(409, "delivery_revoked", "This delivery was revoked.")
            self.signed += 1
            serial = self.signed
        time.sleep(self.delay)
        return {
            p: Link(p, f"http://s3/{p}?sig={serial}", 1, "", self.clock() + self.lifetime)
            for p in paths
        }


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_batches_grow_from_a_small_first_one_and_stay_ahead_of_the_workers():
    clock = Clock()
    platform = FakePlatform(clock)
    book = LinkBook(platform, batch=100, first_batch=10, clock=clock)
    paths = [f"f{i:04d}" for i in range(250)]
    book.queue(paths)
    urls = [book.url(p) for p in paths]
    book.close()
    # every path got a link from a batch that held it, in order
    assert [u.split("?")[0] for u in urls] == [f"http://s3/{p}" for p in paths]
    assert [len(b) for b in platform.batches] == [10, 20, 40, 80, 100]
    assert [p for b in platform.batches for p in b] == paths  # nothing signed twice
    assert book.batch_sizes == [10, 20, 40, 80, 100] and book.requests == 5


def test_a_path_asked_for_again_is_signed_alone():
    clock = Clock()
    platform = FakePlatform(clock)
    book = LinkBook(platform, batch=50, first_batch=5, clock=clock)
    book.queue(["a", "b", "c"])
    first = book.url("b")
    again = book.url("b")  # e.g. storage refused the first as expired
    assert first != again and platform.batches[-1] == ["b"]
    assert book.url("never-queued").startswith("http://s3/never-queued")
    assert platform.batches[-1] == ["never-queued"]
    book.close()


def test_links_that_expired_in_the_book_are_signed_again_together():
    clock = Clock()
    platform = FakePlatform(clock, lifetime=60.0)
    book = LinkBook(platform, batch=100, first_batch=100, clock=clock)
    paths = [f"f{i}" for i in range(30)]
    book.queue(paths)
    book.url(paths[0])
    assert len(platform.batches) == 1
    clock.now += 61  # the download was slow: every link left in the book is stale
    assert book.url(paths[1]).endswith("sig=2")
    assert platform.batches[1] == paths[1:]  # one batch for all of them, not 29 requests
    assert all(book.url(p).endswith("sig=2") for p in paths[2:])
    assert len(platform.batches) == 2
    book.close()


def test_a_refused_batch_fails_the_files_waiting_for_it_but_not_a_held_link():
    clock = Clock()
    platform = FakePlatform(clock, refuse_after=1)
    book = LinkBook(platform, batch=10, first_batch=10, clock=clock)
    paths = [f"f{i}" for i in range(30)]
    book.queue(paths)
    # the first batch's links are good, whatever happens to the next batch
    for p in paths[:10]:
        assert book.url(p).startswith(f"http://s3/{p}?")
    with pytest.raises(ApiError) as refused:
        book.url(paths[10])
    assert refused.value.code == "delivery_revoked"
    with pytest.raises(ApiError):
        book.url(paths[29])
    assert len(platform.batches) == 2  # no request after the refusal
    book.close()


def test_many_threads_get_each_link_once_and_the_prefetcher_keeps_up():
    clock = time.monotonic
    platform = FakePlatform(clock, delay=0.02)
    book = LinkBook(platform, batch=500, first_batch=32, clock=clock)
    paths = [f"f{i:04d}" for i in range(1000)]
    before = set(threading.enumerate())
    book.queue(paths)
    lock = threading.Lock()
    cursor = iter(paths)
    handed: list[list[tuple[str, str]]] = [[] for _ in range(8)]  # one list per worker
    errors: list[BaseException] = []

    def worker(mine: list[tuple[str, str]]):
        # nothing is asserted here: a failure in a thread only warns, so each worker records
        # what it got and what it raised, and the test decides below
        try:
            while True:
                with lock:
                    path = next(cursor, None)
                if path is None:
                    return
                mine.append((path, book.url(path)))
                time.sleep(0.0005)  # the download
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    # daemons: a worker stuck for ever fails the test below instead of hanging the run's exit
    threads = [threading.Thread(target=worker, args=(handed[n],), daemon=True) for n in range(8)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not [thread for thread in threads if thread.is_alive()], "a worker never finished"
    book.close()
    # every thread the book started (its prefetcher) has ended once it is closed
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert errors == []
    got = [pair for mine in handed for pair in mine]
    assert sorted(path for path, _ in got) == paths  # each path handed exactly once
    assert all(url.startswith(f"http://s3/{path}?") for path, url in got)
    signed = [p for b in platform.batches for p in b]
    assert sorted(signed) == sorted(paths)  # each once: no batch raced another
    assert [len(b) for b in platform.batches] == [32, 64, 128, 256, 500, 20]


def test_targets_stay_inside_the_folder(tmp_path):
    root = tmp_path / "dataset"
    root.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "linked").symlink_to(outside, target_is_directory=True)
    targets = Targets(root)
    assert targets("data/chunk-000/file-0001.parquet") == (
        root.resolve() / "data/chunk-000/file-0001.parquet"
    )
    assert targets("manifest.json") == root.resolve() / "manifest.json"
    assert targets("./meta/info.json") == root.resolve() / "meta/info.json"
    for hostile in ("../x", "/etc/passwd", "data/../../x", "", ".", "linked/x", "a/\x00b"):
        with pytest.raises(DownloadFailed):
            targets(hostile)


def test_a_link_stale_on_arrival_is_still_handed_to_the_worker_that_asked():
    # given: links so short-lived that the clock calls them stale as they arrive
    clock = Clock()
    platform = FakePlatform(clock, lifetime=-1.0)
    book = LinkBook(platform, batch=10, first_batch=10, clock=clock)
    book.queue(["a", "b"])
    # then: each worker gets the link fetched for it (storage decides), no endless re-signing
    assert book.url("a").startswith("http://s3/a")
    assert book.url("b").startswith("http://s3/b")
    assert len(platform.batches) == 1
    book.close()


def test_the_journal_survives_a_line_cut_off_by_a_kill(tmp_path):
    from marketplace_client.download import JOURNAL, FileEntry, StateFile

    # given: a journal whose last line a kill cut off mid-way
    good = '{"path": "a.bin", "size": 1, "sha256": "x", "mtime_ns": 5}\n'
    (tmp_path / JOURNAL).parent.mkdir()
    (tmp_path / JOURNAL).write_text(good + '{"path": "b.bi')
    state = StateFile(tmp_path)
    assert set(state.entries) == {"a.bin"}
    # when: the next run records a file
    state.record(FileEntry("c.bin", 2, "y"), 7)
    state.close()
    # then: both verified files are read back, the cut line alone is lost
    again = StateFile(tmp_path)
    assert set(again.entries) == {"a.bin", "c.bin"} and again.entries["c.bin"]["mtime_ns"] == 7


def test_a_body_cut_off_mid_way_continues_with_a_range_request(tmp_path):
    import hashlib
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from marketplace_client.http import ApiClient, RetryPolicy

    body = bytes(range(256)) * 12_000  # ~3 MB
    ranges = []

    class CutOnce(BaseHTTPRequestHandler):
        def do_GET(self):
            asked = self.headers.get("Range")
            ranges.append(asked)
            if asked is None:  # promise everything, send half, hang up
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            start = int(asked.removeprefix("bytes=").removesuffix("-"))
            self.send_response(206)
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            self.wfile.write(body[start:])

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), CutOnce)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = ApiClient(
            "http://127.0.0.1:1", "k", retry=RetryPolicy(attempts=3), sleep=lambda _: None
        )
        target = tmp_path / "file.part"
        got = client.stream_to(
            f"http://127.0.0.1:{server.server_port}/x", target, resume=False, chunk_bytes=65536
        )
    finally:
        server.shutdown()
    assert target.read_bytes() == body
    assert got.size == len(body) and got.sha256 == hashlib.sha256(body).hexdigest()
    assert ranges[0] is None and ranges[-1] == f"bytes={len(body) // 2}-"


def test_a_links_answer_is_taken_only_for_the_paths_asked_and_must_cover_them():
    from marketplace_client.links import links_requester

    class Platform:
        def __init__(self, links, expires_in=300):
            self.body = {"expires_in": expires_in, "links": links}

        def post(self, path, body):
            return self.body

    def link(path):
        return {"path": path, "url": f"http://s3/{path}", "size_bytes": 1}

    got = links_requester(Platform([link("a"), link("b"), link("other")]), "d")(["a", "b"])
    assert sorted(got) == ["a", "b"]  # a link for a path not asked for is dropped
    with pytest.raises(ApiError, match="No link came for 'b'"):
        links_requester(Platform([link("a")]), "d")(["a", "b"])
    for broken in (Platform([{"path": "a"}]), Platform([link("a")], expires_in="soon")):
        with pytest.raises(ApiError, match="Links that do not parse"):
            links_requester(broken, "d")(["a"])
