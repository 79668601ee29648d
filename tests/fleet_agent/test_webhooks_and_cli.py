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
