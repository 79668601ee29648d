"""The API client: backoff on 503/429/connection errors, the platform's error shape on 4xx.
Against a tiny HTTP server on 127.0.0.1 answering a scripted sequence."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleet_agent.client import ApiClient, ApiError, RetryPolicy, TransientError


class Script:
    """Answers each request with the next (status, headers, body); records what came in."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []


@pytest.fixture
def server():
    script = Script([])

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {name.lower(): value for name, value in self.headers.items()}
            script.requests.append((self.command, self.path, headers, body))
            status, headers, payload = script.answers.pop(0)
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = _answer

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    script.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield script
    httpd.shutdown()
    httpd.server_close()


def client_for(url, sleeps, attempts=4):
    return ApiClient(
        url,
        "mk_secret",
        timeout=5,
        retry=RetryPolicy(attempts=attempts, base_seconds=0.5, max_seconds=8, jitter=0),
        sleep=sleeps.append,
    )


def test_503_then_200_is_retried_with_exponential_backoff(server):
    server.answers = [
        (503, {}, {"code": "unavailable", "message": "busy", "fields": {}}),
        (503, {}, b""),
        (200, {}, {"id": "f1", "name": "Acme"}),
    ]
    sleeps = []
    body = client_for(server.url, sleeps).get("fleet/fleets/f1")
    assert body == {"id": "f1", "name": "Acme"}
    assert sleeps == [0.5, 1.0]  # base, then doubled
    assert len(server.requests) == 3
    method, path, headers, _ = server.requests[0]
    assert (method, path) == ("GET", "/api/v1/fleet/fleets/f1")
    assert headers["authorization"] == "Bearer mk_secret"


def test_429_honours_retry_after(server):
    server.answers = [(429, {"Retry-After": "3"}, {"code": "throttled", "message": "slow"})]
    server.answers.append((200, {}, {"ok": True}))
    sleeps = []
    assert client_for(server.url, sleeps).post("fleet/fleets/f1/heartbeat") == {"ok": True}
    assert sleeps == [3.0]


def test_gives_up_after_the_last_attempt(server):
    server.answers = [(502, {}, b"bad gateway")] * 3
    sleeps = []
    with pytest.raises(TransientError, match="after 3 tries: HTTP 502"):
        client_for(server.url, sleeps, attempts=3).get("fleet/jobs")
    assert sleeps == [0.5, 1.0]


def test_backoff_is_capped():
    policy = RetryPolicy(base_seconds=1, max_seconds=5, jitter=0)
    assert [policy.delay(n) for n in range(5)] == [1, 2, 4, 5, 5]
    assert RetryPolicy(base_seconds=1, jitter=0.25).delay(0) <= 1.25


def test_connection_refused_is_retried_then_reported():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends: nobody listens
    sleeps = []
    with pytest.raises(TransientError, match="after 3 tries"):
        client_for(f"http://127.0.0.1:{port}", sleeps, attempts=3).get("fleet/jobs")
    assert len(sleeps) == 2


def test_4xx_raises_the_platform_error_shape_without_retrying(server):
    error = {"code": "invalid", "message": "Check the fields.", "fields": {"kind": ["Unknown."]}}
    server.answers = [(400, {}, error)]
    sleeps = []
    with pytest.raises(ApiError) as caught:
        client_for(server.url, sleeps).post("fleet/sites", {"kind": "moon"})
    assert caught.value.status == 400
    assert caught.value.code == "invalid"
    assert caught.value.message == "Check the fields."
    assert caught.value.fields == {"kind": ["Unknown."]}
    assert "kind" in str(caught.value)
    assert sleeps == [] and len(server.requests) == 1
    _, _, headers, body = server.requests[0]
    assert json.loads(body) == {"kind": "moon"}
    assert headers["content-type"] == "application/json"


def test_a_4xx_without_the_shape_still_explains_itself(server):
    server.answers = [(403, {}, b"<Error>SignatureDoesNotMatch</Error>")]
    with pytest.raises(ApiError) as caught:
        client_for(server.url, []).put_bytes(f"{server.url}/bucket/key?X-Amz=1", b"x", {})
    assert caught.value.status == 403
    assert "SignatureDoesNotMatch" in caught.value.message


def test_put_bytes_sends_exactly_the_given_headers_without_the_api_key(server):
    server.answers = [(200, {"ETag": '"abc"'}, b"")]
    response = client_for(server.url, []).put_bytes(
        f"{server.url}/bucket/key?sig=1", b"hello", {"x-amz-checksum-sha256": "c2hh"}
    )
    assert response.headers["etag"] == '"abc"'
    method, path, headers, body = server.requests[0]
    assert (method, path, body) == ("PUT", "/bucket/key?sig=1", b"hello")
    assert "authorization" not in headers
    assert headers["x-amz-checksum-sha256"] == "c2hh"


def test_list_all_follows_cursor_pages(server):
    server.answers = [
        (200, {}, {"next": f"{server.url}/api/v1/fleet/offers?cursor=2", "results": [{"id": 1}]}),
        (200, {}, {"next": None, "results": [{"id": 2}]}),
    ]
    assert [o["id"] for o in client_for(server.url, []).list_all("fleet/offers")] == [1, 2]
    assert server.requests[1][1] == "/api/v1/fleet/offers?cursor=2"


def test_only_http_urls():
    with pytest.raises(ValueError, match="http"):
        ApiClient("file:///etc", "k")
    with pytest.raises(ValueError, match="http"):
        ApiClient("http://127.0.0.1:1", "k").put_bytes("file:///etc/passwd", b"", {})
