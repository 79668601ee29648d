"""A small local stand-in for Stripe Checkout, which localstripe lacks.

It answers `POST /v1/checkout/sessions` itself and forwards every other request to
localstripe unchanged, so the gateway talks to one base address as it would to Stripe.
A session's `url` serves a small hosted payment page for browser tests: its Pay button
completes the session, sends Stripe's signed `checkout.session.completed` webhook to
`webhook_url` (when set) and redirects the browser to the session's `success_url`; its
Cancel link goes to `cancel_url`. Listens on 127.0.0.1 only.
"""

import html
import json
import threading
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl

from tests.billing.stripe_events import make_event, sign


class FakeCheckout:
    def __init__(
        self, upstream: str, *, webhook_url: str = "", webhook_secret: str = "", port: int = 0
    ):
        self.upstream = upstream.rstrip("/")
        self.webhook_url = webhook_url  # where "Stripe" sends events; settable once known
        self.webhook_secret = webhook_secret
        self.sessions: dict[str, dict] = {}
        self.idempotency_keys: list[str | None] = []
        self.webhook_responses: list[int] = []
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

            def _session_for_page(self) -> dict | None:
                session_id = self.path.split("?", 1)[0].removeprefix("/pay/")
                session = fake.sessions.get(session_id)
                if session is None:
                    self._reply(404, b"No such checkout session.", "text/plain")
                return session

            def do_GET(self):
                if not self.path.startswith("/pay/"):
                    self._forward("GET")
                    return
                session = self._session_for_page()
                if session is not None:
                    self._reply(200, fake.page(session).encode(), "text/html; charset=utf-8")

            def do_DELETE(self):
                self._forward("DELETE")

            def do_POST(self):
                if self.path.startswith("/pay/"):
                    session = self._session_for_page()
                    if session is None:
                        return
                    if session["status"] == "open":
                        fake.send_webhook(
                            "checkout.session.completed", fake.complete(session["id"])
                        )
                    self.send_response(303)
                    self.send_header("Location", session["success_url"])
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
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

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
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
            "cancel_url": form.get("cancel_url"),
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

    def page(self, session: dict) -> str:
        """The hosted payment page: what the customer sees at the session's url."""
        amount = f"{session['amount_total'] / 100:,.2f} {session['currency'].upper()}"
        if session["status"] != "open":
            body = f"<p role='status'>This checkout session is {session['status']}.</p>"
        else:
            body = f"""
  <form method="post" action="/pay/{html.escape(session["id"])}">
    <p><label for="card">Card number</label><br>
    <input id="card" name="card" value="4242 4242 4242 4242" autocomplete="cc-number"></p>
    <button type="submit">Pay {html.escape(amount)}</button>
  </form>
  <p><a href="{html.escape(session["cancel_url"] or "")}">Cancel and return</a></p>"""
        return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Checkout (local test stand-in)</title>
<style>body {{ font-family: system-ui, sans-serif; max-width: 28rem; margin: 3rem auto; }}
button {{ font: inherit; padding: .6rem 1.2rem; background: #635bff; color: #fff; border: 0;
border-radius: 4px; }}</style></head>
<body><main>
  <h1>Checkout</h1>
  <p>Pay <strong id="checkout-amount">{html.escape(amount)}</strong></p>
  <p>{html.escape(session.get("metadata", {}).get("order_id", ""))}</p>
  {body}
</main></body></html>"""

    def send_webhook(self, event_type: str, obj: dict) -> None:
        """Deliver a Stripe-signed event (t=<ts>,v1=HMAC-SHA256(secret, "<ts>.<body>"))."""
        if not self.webhook_url:
            return
        body = make_event(event_type, obj)
        request = urllib.request.Request(
            self.webhook_url,
            data=body.encode(),
            headers={
                "Content-Type": "application/json",
                "Stripe-Signature": sign(body, secret=self.webhook_secret),
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                self.webhook_responses.append(response.status)
        except urllib.error.HTTPError as exc:
            self.webhook_responses.append(exc.code)
        except urllib.error.URLError:
            self.webhook_responses.append(0)  # nothing listening: the browser still goes back

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    """Pay from the web on a developer machine: see README, "Paying locally"."""
    import argparse

    parser = argparse.ArgumentParser(description="Local Stripe Checkout stand-in (127.0.0.1).")
    parser.add_argument("--port", type=int, default=8421)
    parser.add_argument("--upstream", default="http://127.0.0.1:8420", help="localstripe")
    parser.add_argument("--webhook-url", default="http://127.0.0.1:8000/billing/stripe/webhook/")
    parser.add_argument("--webhook-secret", default="whsec_local")
    args = parser.parse_args()
    fake = FakeCheckout(
        args.upstream,
        webhook_url=args.webhook_url,
        webhook_secret=args.webhook_secret,
        port=args.port,
    )
    print(f"Checkout stand-in on {fake.url}, webhooks to {args.webhook_url}", flush=True)
    try:
        fake.thread.join()
    except KeyboardInterrupt:
        fake.close()


if __name__ == "__main__":
    main()
