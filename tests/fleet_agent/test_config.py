"""Parsing the agent's TOML file: the example is valid, mistakes name the offending key."""

from decimal import Decimal
from pathlib import Path

import pytest

import fleet_agent
from fleet_agent.config import ConfigError, load_config

EXAMPLE = Path(fleet_agent.__file__).parent / "example-fleet.toml"

MINIMAL = """
base_url = "http://127.0.0.1:8000"
api_key = "mk_test_key"

[fleet]
name = "Acme"
weekly_capacity_hours = 40
payout_rate_per_hour = 60.5

[[sites]]
name = "Bench A"
kind = "lab_bench"
objects = ["peg-8mm"]

[[sites.robots]]
name = "fr3-01"
embodiment = "franka-fr3"
"""


def write(tmp_path, text):
    path = tmp_path / "fleet.toml"
    path.write_text(text)
    return path


def test_the_example_file_is_valid():
    config = load_config(EXAMPLE, environ={"FLEET_API_KEY": "mk_from_env"})
    assert config.api_key == "mk_from_env"
    assert len(config.sites) >= 2
    assert all(site.robots for site in config.sites)


def test_a_minimal_file_gets_defaults(tmp_path):
    config = load_config(write(tmp_path, MINIMAL))
    assert config.base_url == "http://127.0.0.1:8000"
    assert config.fleet.payout_rate_per_hour == Decimal("60.5")
    assert config.fleet.currency == "USD" and config.fleet.timezone == "UTC"
    [site] = config.sites
    assert site.kind == "lab_bench" and site.objects == ("peg-8mm",)
    [robot] = site.robots
    assert robot.end_effector == "parallel_gripper" and robot.sensors == ()
    assert config.collection.fps == 30 and config.collection.defect_rate == 0.0


def test_api_key_from_the_environment(tmp_path):
    text = MINIMAL.replace('api_key = "mk_test_key"', 'api_key_env = "MY_KEY"')
    assert load_config(write(tmp_path, text), environ={"MY_KEY": "mk_x"}).api_key == "mk_x"
    with pytest.raises(ConfigError, match="MY_KEY is not set"):
        load_config(write(tmp_path, text), environ={})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('api_key = "mk_test_key"', ""), "api_key: required"),
        (('"http://127.0.0.1:8000"', '"ftp://x"'), "base_url"),
        (('kind = "lab_bench"', 'kind = "moon_base"'), r"sites\[0\].kind: 'moon_base'"),
        (("weekly_capacity_hours = 40", "weekly_capacity_hours = -1"), "weekly_capacity_hours"),
        (("weekly_capacity_hours = 40", ""), "fleet.weekly_capacity_hours: required"),
        (('name = "Acme"', 'name = ""'), "fleet.name"),
        (('embodiment = "franka-fr3"', 'embodiment = "franka fr3"'), "robots\\[0\\].embodiment"),
        (('embodiment = "franka-fr3"', 'end_effector = "claw"'), "robots\\[0\\].embodiment"),
        (('objects = ["peg-8mm"]', "objects = 3"), r"sites\[0\].objects"),
        (('objects = ["peg-8mm"]', 'colour = "red"'), "unknown key.*colour"),
    ],
)
def test_mistakes_name_the_key(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, MINIMAL.replace(*change)))


@pytest.mark.parametrize(
    ("collection", "message"),
    [
        ("fps = 0", "collection.fps"),
        ("fps = 2.5", "collection.fps"),
        ("episode_seconds = [30, 10]", "collection.episode_seconds"),
        ("episode_seconds = [0.5, 10]", "collection.episode_seconds"),
        ("defect_rate = 1.5", "collection.defect_rate"),
        ('operators = ["Jane Doe"]', "collection.operators"),
        ("poll_seconds = 0", "collection.poll_seconds"),
        ('seed = "x"', "collection.seed"),
    ],
)
def test_collection_mistakes(tmp_path, collection, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, MINIMAL + f"\n[collection]\n{collection}\n"))


def test_bad_end_effector_and_duplicates(tmp_path):
    text = MINIMAL + 'end_effector = "claw"\n'
    with pytest.raises(ConfigError, match="end_effector: 'claw'"):
        load_config(write(tmp_path, text))
    text = MINIMAL + '\n[[sites]]\nname = "Bench A"\nkind = "office"\n'
    with pytest.raises(ConfigError, match="site names must be unique"):
        load_config(write(tmp_path, text))


def test_no_sites_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="at least one"):
        load_config(write(tmp_path, MINIMAL.split("[[sites]]")[0]))
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(write(tmp_path, "base_url = "))


def test_webhook_table(tmp_path):
    config = load_config(write(tmp_path, MINIMAL + '\n[webhook]\nlisten = "127.0.0.2:8765"\n'))
    assert (config.webhook.host, config.webhook.port, config.webhook.url) == ("127.0.0.2", 8765, "")
    assert load_config(write(tmp_path, MINIMAL)).webhook is None
    with pytest.raises(ConfigError, match=r"webhook\.listen"):
        load_config(write(tmp_path, MINIMAL + '\n[webhook]\nlisten = "8765"\n'))
    with pytest.raises(ConfigError, match=r"webhook\.url"):
        load_config(write(tmp_path, MINIMAL + '\n[webhook]\nurl = "ftp://x"\n'))
    both = MINIMAL.replace(
        "payout_rate_per_hour = 60.5", 'payout_rate_per_hour = 1\nwebhook_url = "https://x.example"'
    )
    with pytest.raises(ConfigError, match="leave it out"):
        load_config(write(tmp_path, both + "\n[webhook]\n"))
