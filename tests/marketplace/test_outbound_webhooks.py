"""Outbound requests that cannot reach inside (issue 14): the real checks, on IP literals,
numeric spellings the C resolver accepts, names (localhost; others through a resolver that
answers as DNS would), at registration and again at every send; pinned connections, no
redirects, a whole-request deadline and a cap on the bytes read, against loopback servers."""

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

import pytest

from marketplace import outbound_webhooks
from marketplace.errors import ServiceError

INTERNAL_URLS = [
    "https://localhost/h",
    "https://127.0.0.1/h",
    "https://2130706433/h",  # 127.0.0.1 as one number
    "https://0x7f.1/h",
    "https://0177.0.0.1/h",
    "https://127.1/h",
    "https://[::1]/h",
    "https://[::ffff:127.0.0.1]/h",
    "https://[::ffff:7f00:1]/h",
    "https://10.1.2.3/h",
    "https://172.16.0.9/h",
    "https://192.168.1.1/h",
    "https://100.64.0.1/h",  # shared address space (CGNAT)
    "https://169.254.169.254/latest/meta-data/",  # the cloud metadata service
    "https://0.0.0.0/h",
    "https://224.0.0.1/h",
    "https://240.0.0.1/h",
    "https://198.18.0.1/h",
    "https://[fc00::1]/h",
    "https://[fd12:3456::1]/h",
    "https://[fe80::1]/h",
    "https://[64:ff9b::a00:1]/h",  # NAT64 of 10.0.0.1
    "https://[2002:7f00:1::1]/h",  # 6to4 of 127.0.0.1
    "https://[ff02::1]/h",
]


@pytest.mark.parametrize("url", INTERNAL_URLS)
def test_internal_destinations_are_refused_at_registration(url):
    with pytest.raises(ServiceError) as refused:
        outbound_webhooks.validate_url(url, field_name="webhook_url", allow_insecure=False)
    assert refused.value.code == "invalid_webhook_url"
    assert "public" in refused.value.fields["webhook_url"][0]


@pytest.mark.parametrize("url", INTERNAL_URLS)
def test_internal_destinations_are_refused_at_send_time(url):
    result = send(url)
    assert not result.ok and result.permanent and result.error.startswith("refused")


def resolving(mapping: dict[str, list[str]]):
    """socket.getaddrinfo answering for these names as DNS would, the real one otherwise."""
    real = socket.getaddrinfo

    def fake(host, port, *args, **kwargs):
        if host in mapping:
            return [
                (
                    socket.AF_INET6 if ":" in a else socket.AF_INET,
                    socket.SOCK_STREAM,
                    6,
                    "",
                    (a, port),
                )
                for a in mapping[host]
            ]
        return real(host, port, *args, **kwargs)

    return mock.patch("socket.getaddrinfo", fake)


def test_names_resolving_inside_are_refused_even_with_a_public_address_too():
    names = {
        "internal.example": ["10.0.0.7"],
        "mixed.example": ["93.184.216.34", "192.168.0.2"],
        "cgnat.example": ["100.100.1.1"],
        "v6local.example": ["fd00::5"],
    }
    with resolving(names):
        for name in names:
            with pytest.raises(ServiceError):
                outbound_webhooks.validate_url(
                    f"https://{name}/h", field_name="url", allow_insecure=False
                )
            assert send(f"https://{name}/h").permanent


def test_public_names_and_names_that_do_not_resolve_yet_are_accepted():
    with resolving({"fleet.example": ["93.184.216.34", "2606:2800:220:1::1"]}):
        url = "https://fleet.example/hooks"
        assert outbound_webhooks.validate_url(url, field_name="url", allow_insecure=False) == url
    # not resolvable now: accepted, and checked again at every send
    url = "https://not-yet.invalid/hooks"
    assert outbound_webhooks.validate_url(url, field_name="url", allow_insecure=False) == url
    assert send(url).permanent


def test_the_insecure_flag_allows_loopback_http_only():
    url = "http://127.0.0.1:9/h"
    assert outbound_webhooks.validate_url(url, field_name="url", allow_insecure=True) == url
    for inside in ("http://10.0.0.1/h", "http://169.254.169.254/", "http://[fd00::1]/h"):
        with pytest.raises(ServiceError):
            outbound_webhooks.validate_url(inside, field_name="url", allow_insecure=True)


class Server:
    """A loopback HTTP server whose handler is given; counts the requests it received."""

    def __init__(self, handle):
        self.hits = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                server.hits += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                handle(self)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def send(url: str, *, timeout: float = 5, allow_loopback: bool = False):
    return outbound_webhooks.post(
        url=url,
        secret="s",
        event_type="offer.created",
        delivery_id="d",
        payload={"n": 1},
        timeout=timeout,
        allow_loopback=allow_loopback,
    )


def test_a_name_rebound_to_loopback_after_registration_is_refused_at_send_time():
    # given: a receiver on loopback, and a name that resolved to a public address when saved
    server = Server(lambda h: (h.send_response(200), h.end_headers()))
    try:
        port = server.httpd.server_address[1]
        url = f"https://rebind.example:{port}/hook"
        with resolving({"rebind.example": ["93.184.216.34"]}):
            outbound_webhooks.validate_url(url, field_name="url", allow_insecure=False)
        # when: by the time the event is sent, the name answers 127.0.0.1
        with resolving({"rebind.example": ["127.0.0.1"]}):
            result = send(url)
        # then: refused without a byte sent
        assert result.permanent and "127.0.0.1" in result.error
        assert server.hits == 0
    finally:
        server.close()


def test_redirects_are_not_followed():
    target = Server(lambda h: (h.send_response(200), h.end_headers()))
    redirector = Server(
        lambda h: (h.send_response(307), h.send_header("Location", target.url), h.end_headers())
    )
    try:
        result = send(redirector.url, allow_loopback=True)
        assert not result.ok and result.status_code == 307
        assert "redirects are not followed" in result.error
        assert target.hits == 0
    finally:
        target.close()
        redirector.close()


def test_a_trickling_receiver_is_cut_at_the_deadline():
    def trickle(handler):
        handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        for _ in range(40):  # one header byte every 0.25 s: 10 s in all
            handler.wfile.write(b"X")
            handler.wfile.flush()
            time.sleep(0.25)

    server = Server(trickle)
    try:
        started = time.monotonic()
        result = send(server.url, timeout=1.5, allow_loopback=True)
        elapsed = time.monotonic() - started
        assert not result.ok and "timed out" in result.error
        assert elapsed < 2.5  # the whole request, not each read
    finally:
        server.close()


def test_no_more_of_an_answer_than_the_cap_is_read():
    sent = {"bytes": 0}

    def flood(handler):
        handler.send_response(200)
        handler.send_header("Content-Length", str(50 * 1024**2))
        handler.end_headers()
        chunk = b"x" * 65536
        try:
            for _ in range(800):
                handler.wfile.write(chunk)
                sent["bytes"] += len(chunk)
        except OSError:
            pass  # the client hung up, as it should

    server = Server(flood)
    try:
        result = outbound_webhooks.post(
            url=server.url,
            secret="s",
            event_type="e",
            delivery_id="d",
            payload={},
            timeout=10,
            allow_loopback=True,
            max_response_bytes=64 * 1024,
        )
        time.sleep(0.3)
        assert result.ok
        assert sent["bytes"] < 10 * 1024**2  # the rest of the 50 MiB was never taken
    finally:
        server.close()
