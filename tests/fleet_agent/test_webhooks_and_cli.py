"""The webhook signature recipe (as fleets/README.md documents it) and the CLI's exits."""

import hashlib
import hmac
import time

from fleet_agent import cli, webhooks


def test_verify_accepts_the_platforms_signature_and_refuses_the_rest():
    secret, body = "whsec_abc", b'{"type": "offer.created"}'
    now = int(time.time())
    mac = hmac.new(secret.encode(), f"{now}.".encode() + body, hashlib.sha256).hexdigest()
    header = f"t={now},v1={mac}"
    assert webhooks.sign(secret, body, now) == header
    assert webhooks.verify(secret, header, body)
    assert not webhooks.verify("whsec_other", header, body)
    assert not webhooks.verify(secret, header, body + b" ")
    assert not webhooks.verify(secret, webhooks.sign(secret, body, now - 301), body)
    assert not webhooks.verify(secret, "garbage", body)


def test_cli_bad_config_exits_2(tmp_path, capsys):
    path = tmp_path / "fleet.toml"
    path.write_text('base_url = "http://127.0.0.1:1"\n')
    assert cli.main(["--config", str(path)]) == 2
    assert "api_key" in capsys.readouterr().err


def test_cli_unreachable_platform_exits_1(tmp_path, capsys):
    path = tmp_path / "fleet.toml"
    path.write_text(
        'base_url = "http://127.0.0.1:1"\napi_key = "k"\n'
        '[fleet]\nname = "A"\nweekly_capacity_hours = 1\npayout_rate_per_hour = 1\n'
        '[[sites]]\nname = "S"\nkind = "office"\n'
    )
    assert cli.main(["--config", str(path), "--once", "--max-seconds", "5", "--retries", "1"]) == 1
    assert "failed after 1 tries" in capsys.readouterr().err


def _post(url, body, headers):
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_receiver_verifies_dedupes_and_hands_events_on():
    events = []
    secret = {"value": "whsec_1"}
    receiver = webhooks.WebhookReceiver(secret=lambda: secret["value"], on_event=events.append)
    url = receiver.start()
    try:
        body = b'{"type": "offer.created", "data": {}}'
        signed = {
            "X-Marketplace-Signature": webhooks.sign("whsec_1", body),
            "X-Marketplace-Delivery": "d1",
            "Content-Type": "application/json",
        }
        assert _post(url, body, signed) == 200
        assert _post(url, body, signed) == 200  # a retry of the same delivery
        assert events == [{"type": "offer.created", "data": {}}]
        forged = {**signed, "X-Marketplace-Signature": webhooks.sign("whsec_x", body)}
        assert _post(url, body, {**forged, "X-Marketplace-Delivery": "d2"}) == 401
        secret["value"] = "whsec_2"  # rotated: old signatures no longer pass
        assert _post(url, body, {**signed, "X-Marketplace-Delivery": "d3"}) == 401
        assert receiver.rejected == 2
        assert _post(url.replace("/marketplace", "/other"), body, signed) == 404
        assert len(events) == 1
    finally:
        receiver.stop()
