"""A fault-injecting HTTP proxy in front of the local S3 server, on 127.0.0.1.

Requests pass through unchanged (the Host header too, so SigV4 signatures still verify
upstream) unless a fault is armed: answer an S3 error (503 SlowDown by default) to the next
`fail_next` requests or to a fraction of them, close connections without answering, or
delay every request (to hold a worker mid-task). Counters tell the test what happened.
"""

import http.client
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "expect", "transfer-encoding", "proxy-connection"}
ERROR_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
    "<Message>Injected fault</Message><RequestId>fault</RequestId></Error>"
)


class FaultyS3Proxy:
    def __init__(self, upstream_url: str, seed: int = 7):
        upstream = urlsplit(upstream_url)
        self.upstream = (upstream.hostname, upstream.port)
        self.lock = threading.Lock()
        self.random = random.Random(seed)
        self.reset()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as boto3 expects

            def do_any(self):
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_any

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def reset(self) -> None:
        """Pass everything through, counters at zero."""
        with self.lock:
            self.fail_next = 0
            self.fail_fraction = 0.0
            self.fail_status = 503
            self.fail_code = "SlowDown"
            self.close_connections = False
            self.delay_seconds = 0.0
            # Faults only for requests this predicate selects (None: all of them).
            self.fail_only: Callable[[BaseHTTPRequestHandler], bool] | None = None
            self.requests = 0
            self.failed = 0
            self.methods: Counter[str] = Counter()
            self.first_request_at: float | None = None

    def _fault(self, request: BaseHTTPRequestHandler) -> str | None:
        with self.lock:
            self.requests += 1
            self.methods[request.command] += 1
            if self.fail_only is not None and not self.fail_only(request):
                return None
            if self.first_request_at is None:
                self.first_request_at = time.monotonic()
            if self.close_connections:
                self.failed += 1
                return "close"
            if self.fail_next > 0 or (
                self.fail_fraction and self.random.random() < self.fail_fraction
            ):
                self.fail_next = max(0, self.fail_next - 1)
                self.failed += 1
                return "status"
            return None

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        if len(body) < length:  # the client died mid-body: forward nothing, as a real S3 would
            request.close_connection = True
            return
        if self.delay_seconds:
            time.sleep(self.delay_seconds)
        fault = self._fault(request)
        if fault == "close":
            request.close_connection = True
            request.connection.shutdown(socket.SHUT_RDWR)
            return
        if fault == "status":
            payload = ERROR_BODY.format(code=self.fail_code).encode()
            request.send_response(self.fail_status)
            request.send_header("Content-Type", "application/xml")
            request.send_header("Content-Length", str(len(payload)))
            request.end_headers()
            if request.command != "HEAD":
                request.wfile.write(payload)
            return
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        upstream = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            upstream.request(request.command, request.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            request.send_response(response.status, response.reason)
            for name, value in response.getheaders():
                if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                    request.send_header(name, value)
            if request.command == "HEAD":
                request.send_header("Content-Length", response.getheader("Content-Length", "0"))
            else:
                request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            if request.command != "HEAD":
                request.wfile.write(data)
        finally:
            upstream.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
