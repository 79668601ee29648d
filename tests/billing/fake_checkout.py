"""A small local stand-in for Stripe Checkout, which localstripe lacks.

It answers `POST /v1/checkout/sessions` itself and forwards every other request to
localstripe unchanged, so the gateway talks to one base address as it would to Stripe.
Listens on 127.0.0.1 only.
"""

import json
import threading
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl


class FakeCheckout:
    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/")
        self.sessions: dict[str, dict] = {}
        self.idempotency_keys: list[str | None] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, body: bytes, content_type="application/json"):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self, method: str) -> None:
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
                self._forward("GET")

            def do_DELETE(self):
                self._forward("DELETE")

            def do_POST(self):
                if not self.path.startswith("/v1/checkout/sessions"):
                    self._forward("POST")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                form = dict(parse_qsl(self.rfile.read(length).decode()))
                fake.idempotency_keys.append(self.headers.get("Idempotency-Key"))
                session = fake.create_session(form)
                self._reply(200, json.dumps(session).encode())

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def create_session(self, form: dict[str, str]) -> dict:
        session_id = f"cs_test_{uuid.uuid4().hex[:24]}"
        amount = int(form["line_items[0][price_data][unit_amount]"]) * int(
            form.get("line_items[0][quantity]", "1")
        )
        metadata = {
            key[len("metadata[") : -1]: value
            for key, value in form.items()
            if key.startswith("metadata[")
        }
        session = {
            "id": session_id,
            "object": "checkout.session",
            "mode": form.get("mode"),
            "customer": form.get("customer"),
            "client_reference_id": form.get("client_reference_id"),
            "amount_total": amount,
            "currency": form["line_items[0][price_data][currency]"],
            "metadata": metadata,
            "payment_status": "unpaid",
            "status": "open",
            "payment_intent": None,
            "success_url": form.get("success_url"),
            "url": f"{self.url}/pay/{session_id}",
        }
        self.sessions[session_id] = session
        return session

    def complete(self, session_id: str) -> dict:
        """What Stripe reports once the customer paid on the hosted page."""
        session = self.sessions[session_id]
        session.update(
            status="complete",
            payment_status="paid",
            payment_intent=f"pi_checkout_{uuid.uuid4().hex[:16]}",
        )
        return dict(session)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
