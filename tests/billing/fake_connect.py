"""A small local stand-in for Stripe Connect transfers, which localstripe lacks.

It answers `POST /v1/transfers` (and `GET /v1/transfers`, `GET /v1/transfers/<id>`) itself,
honouring `Idempotency-Key` like Stripe (same key and parameters: the same transfer back;
same key, other parameters: 400), and forwards every other request to an upstream (e.g.
localstripe), so the gateway talks to one base address as it would to Stripe. Listens on
127.0.0.1 only. `fail_with(status)` makes the next transfer requests fail (Stripe down).
"""

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit


def _error(kind: str, message: str, code: str = "") -> bytes:
    return json.dumps({"error": {"type": kind, "message": message, "code": code}}).encode()


class FakeConnect:
    def __init__(self, upstream: str | None = None, accounts: set[str] | None = None):
        self.upstream = (upstream or "").rstrip("/")
        # Connected accounts that exist; None: any acct_... id exists.
        self.accounts = accounts
        self.transfers: dict[str, dict] = {}
        self.requests: list[dict] = []  # every POST /v1/transfers as received
        self.by_key: dict[str, tuple[dict, dict]] = {}  # key -> (params, transfer)
        self.failing_status: int | None = None
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, body: bytes):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self, method: str) -> None:
                if not fake.upstream:
                    self._reply(404, _error("invalid_request_error", "Unknown path."))
                    return
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("authorization", "content-type", "idempotency-key")
                }
                request = urllib.request.Request(
                    fake.upstream + self.path, data=data, headers=headers, method=method
                )
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        self._reply(response.status, response.read())
                except urllib.error.HTTPError as exc:
                    self._reply(exc.code, exc.read())

            def do_GET(self):
                path = urlsplit(self.path).path
                if path.startswith("/v1/transfers") and fake.failing_status is not None:
                    self._reply(fake.failing_status, _error("api_error", "Stripe is down."))
                elif path == "/v1/transfers":
                    query = dict(parse_qsl(urlsplit(self.path).query))
                    group = query.get("transfer_group")
                    data = [
                        t
                        for t in fake.transfers.values()
                        if group is None or t["transfer_group"] == group
                    ]
                    body = {"object": "list", "data": data, "has_more": False}
                    self._reply(200, json.dumps(body).encode())
                elif path.startswith("/v1/transfers/"):
                    transfer = fake.transfers.get(path.rsplit("/", 1)[1])
                    if transfer is None:
                        self._reply(404, _error("invalid_request_error", "No such transfer."))
                    else:
                        self._reply(200, json.dumps(transfer).encode())
                else:
                    self._forward("GET")

            def do_POST(self):
                if urlsplit(self.path).path != "/v1/transfers":
                    self._forward("POST")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                params = dict(parse_qsl(self.rfile.read(length).decode()))
                key = self.headers.get("Idempotency-Key")
                status, body = fake.create_transfer(
                    params, key, authorized=bool(self.headers.get("Authorization"))
                )
                self._reply(status, json.dumps(body).encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def fail_with(self, status: int | None) -> None:
        """Answer transfer requests with this HTTP status (500: Stripe down); None: work."""
        self.failing_status = status

    def create_transfer(self, params: dict[str, str], key: str | None, *, authorized: bool):
        with self.lock:
            self.requests.append({"params": params, "idempotency_key": key})
            if self.failing_status is not None:
                return self.failing_status, json.loads(_error("api_error", "Stripe is down."))
            if not authorized:
                return 401, json.loads(_error("invalid_request_error", "No API key."))
            if key and key in self.by_key:
                earlier_params, transfer = self.by_key[key]
                if earlier_params != params:
                    return 400, json.loads(
                        _error(
                            "idempotency_error",
                            "Keys for idempotent requests can only be used with the same "
                            "parameters they were first used with.",
                        )
                    )
                return 200, transfer
            destination = params.get("destination", "")
            known = (
                destination.startswith("acct_")
                if self.accounts is None
                else destination in self.accounts
            )
            if not known:
                return 400, json.loads(
                    _error(
                        "invalid_request_error",
                        f"No such destination: '{destination}'",
                        "resource_missing",
                    )
                )
            amount = int(params["amount"])
            if amount <= 0:
                return 400, json.loads(_error("invalid_request_error", "Invalid amount."))
            transfer = {
                "id": f"tr_{uuid.uuid4().hex[:24]}",
                "object": "transfer",
                "amount": amount,
                "currency": params["currency"],
                "destination": destination,
                "transfer_group": params.get("transfer_group"),
                "metadata": {
                    k[len("metadata[") : -1]: v
                    for k, v in params.items()
                    if k.startswith("metadata[")
                },
                "reversed": False,
                "created": int(time.time()),
                "livemode": False,
            }
            self.transfers[transfer["id"]] = transfer
            if key:
                self.by_key[key] = (params, transfer)
            return 200, transfer

    def sent(self) -> list[dict]:
        """The transfers that exist (what the fleets actually received)."""
        return list(self.transfers.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
