"""The agent against the real platform: live_server (another thread of this process), the
local S3 server, and Celery run eagerly (QA and delivery run inside the request that queues
them). A customer's paid order is planned and offered to the agent's fleet; the agent
accepts, uploads episodes, QA decides, the job completes and the order is delivered."""

from decimal import Decimal

import pytest

from datasets.models import Delivery, Episode
from fleet_agent import FleetAgent, parse_config
from fleet_agent.config import WebhookConfig
from fleets.models import Fleet, Job, Robot, Site
from fleets.services.planning import order_plan
from marketplace.models import Organization
from orders.models import Order
from tests.factories import OrderFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

QA_REASONS_OF_DEFECTS = (
    {"non_finite", "timestamp_gap", "fps_mismatch", "vector_length"}
    | {
        # the agent's content defects (issue 16)
        "state_out_of_limits",
        "state_jump",
        "idle_episode",
        "frozen_signal",
        "action_state_mismatch",
        "near_duplicate",
    }
    | {
        # the agent's video defects (issue 15): dropped frames, wrong rate, a still stretch, a cut
        "video_frame_count",
        "video_lengths_differ",
        "video_variable_frame_rate",
        "video_timestamps",
        "video_fps_mismatch",
        "video_frozen",
        "video_decode_error",
        "video_unreadable",
        "video_container",  # a cut file whose index (at its end) is gone
    }
)


@pytest.fixture
def platform(live_server, s3, eager_celery):
    return live_server.url


@pytest.fixture
def operator(make_tenant):
    return make_tenant(Organization.Kind.FLEET_OPERATOR)


def config_for(base_url, api_key, *, name="Agent Fleet", **collection):
    return parse_config(
        {
            "base_url": base_url,
            "api_key": api_key,
            "fleet": {"name": name, "weekly_capacity_hours": 40, "payout_rate_per_hour": 55},
            "sites": [
                {
                    "name": "Bench A",
                    "kind": "lab_bench",
                    "objects": ["peg-8mm", "block", "socket"],
                    "robots": [
                        {
                            "name": "fr3-01",
                            "embodiment": "franka-fr3",
                            "end_effector": "parallel_gripper",
                            "sensors": ["wrist-camera"],
                        }
                    ],
                }
            ],
            "collection": {
                "episode_seconds": [10, 25],
                "poll_seconds": 0.1,
                "seed": 11,
                **collection,
            },
        }
    )


def paid_order(customer, hours="0.02", environments=1) -> Order:
    """A paid order, planned and dispatched as the order_paid signal would (tasks eager)."""
    order = OrderFactory(
        organization=customer.organization,
        status=Order.Status.PAID,
        hours=Decimal(hours),
        environments=environments,
    )
    order_plan(order_id=order.id)  # autocommit: on_commit dispatch runs now
    return order


def assert_delivered(order: Order) -> None:
    order.refresh_from_db()
    assert order.status == Order.Status.DELIVERED, order.status
    assert order.accepted_seconds >= order.hours * 3600
    jobs = list(Job.objects.filter(order=order))
    assert jobs and all(job.status == Job.Status.COMPLETED for job in jobs)
    delivery = Delivery.objects.get(order=order, kind=Delivery.Kind.FULL)
    assert delivery.status == Delivery.Status.READY
    assert delivery.episodes == Episode.objects.filter(order=order, status="accepted").count()


def test_agent_takes_a_paid_order_to_delivered(platform, operator, customer):
    agent = FleetAgent(config_for(platform, operator.raw_key))
    agent.register()
    order = paid_order(customer)
    assert Job.objects.get(order=order).status == Job.Status.OFFERED

    summary = agent.run_once(max_seconds=120)

    assert summary.stopped_because == "idle", summary.as_dict()
    assert summary.errors == []
    assert summary.offers_accepted == 1
    assert_delivered(order)
    episodes = Episode.objects.filter(order=order)
    assert summary.episodes_uploaded == episodes.count() >= 3
    assert summary.episodes_accepted == episodes.filter(status="accepted").count()
    assert summary.episodes_rejected == 0
    assert summary.uploads_by_method == {"single": summary.episodes_uploaded}
    job = Job.objects.get(order=order)
    assert summary.jobs_completed == {str(job.id)}
    assert job.fleet.name == "Agent Fleet" and job.fleet.last_heartbeat_at is not None
    assert job.events.filter(to_status=Job.Status.IN_PROGRESS).exists()
    first = episodes.first()
    assert first.fps == 30 and first.operator in {"op-1", "op-2", "op-3"}
    assert set(first.objects_handled) <= {"peg-8mm", "block", "socket"}
    assert first.task_instruction == "peg insertion"


def test_defective_episodes_are_rejected_and_recollected(platform, operator, customer):
    agent = FleetAgent(config_for(platform, operator.raw_key), defect_rate=0.5)
    agent.register()
    order = paid_order(customer, hours="0.03")

    summary = agent.run_once(max_seconds=120)

    assert summary.stopped_because == "idle", summary.as_dict()
    assert summary.defective_uploaded >= 1
    rejected = Episode.objects.filter(order=order, status="rejected")
    assert summary.episodes_rejected == rejected.count() == summary.defective_uploaded
    for episode in rejected:
        codes = {failure["code"] for failure in episode.qa_failures}
        assert codes and codes <= QA_REASONS_OF_DEFECTS, episode.qa_failures
    assert sum(summary.rejection_reasons.values()) >= rejected.count()
    assert_delivered(order)
    accepted = Episode.objects.filter(order=order, status="accepted")
    assert sum(e.duration_seconds for e in accepted) >= order.hours * 3600


def test_large_episodes_go_multipart(platform, operator, customer, settings):
    settings.EPISODE_MULTIPART_THRESHOLD_BYTES = 20_000
    settings.EPISODE_MULTIPART_PART_BYTES = 16_000
    agent = FleetAgent(config_for(platform, operator.raw_key, episode_seconds=[12, 12]))
    agent.register()
    order = paid_order(customer, hours="0.01")

    summary = agent.run_once(max_seconds=120)

    assert summary.uploads_by_method["multipart"] == summary.episodes_uploaded >= 1
    assert summary.errors == []
    assert_delivered(order)


def test_registration_is_idempotent_by_name(platform, operator):
    config = config_for(platform, operator.raw_key)
    first = FleetAgent(config).register()
    assert FleetAgent(config).webhook_secret is None
    again = FleetAgent(config)
    second = again.register()
    assert again.webhook_secret is None  # reused: no new fleet, no new secret
    assert second["fleet"]["id"] == first["fleet"]["id"]
    assert [s["id"] for s in second["sites"]] == [s["id"] for s in first["sites"]]
    assert [r["id"] for r in second["robots"]] == [r["id"] for r in first["robots"]]
    assert Fleet.objects.filter(organization=operator.organization).count() == 1
    assert Site.objects.count() == 1 and Robot.objects.count() == 1

    # a changed file updates what differs, still without duplicates
    changed = parse_config(
        {
            "base_url": platform,
            "api_key": operator.raw_key,
            "fleet": {
                "name": "Agent Fleet",
                "weekly_capacity_hours": 80,
                "payout_rate_per_hour": 55,
            },
            "sites": [
                {
                    "name": "Bench A",
                    "kind": "production_line",
                    "objects": ["gear"],
                    "robots": [{"name": "fr3-01", "embodiment": "ur5e"}],
                }
            ],
        }
    )
    FleetAgent(changed).register()
    fleet = Fleet.objects.get(organization=operator.organization)
    assert fleet.weekly_capacity_hours == Decimal("80")
    site = Site.objects.get()
    assert site.kind == "production_line" and site.objects_available == ["gear"]
    assert Robot.objects.get().embodiment.slug == "ur5e"


def test_offers_the_fleet_cannot_do_are_declined(platform, operator, customer):
    config = config_for(platform, operator.raw_key)
    agent = FleetAgent(config)
    agent.register()
    order = paid_order(customer)
    # the job turns out to need tactile fingertips, which the fleet's robot lacks
    Job.objects.filter(order=order).update(sensor_slugs=["tactile"])
    summary = agent.run_once(max_seconds=30)
    assert summary.offers_declined == 1 and summary.offers_accepted == 0
    assert Job.objects.get(order=order).status in (Job.Status.OPEN, Job.Status.FLAGGED)


def test_two_agents_of_one_organization_each_take_only_their_fleets_offers(
    platform, operator, customer
):
    first = FleetAgent(config_for(platform, operator.raw_key, name="North"))
    second = FleetAgent(config_for(platform, operator.raw_key, name="South"))
    first.register()
    second.register()
    # two environments: diversity puts them on distinct sites, one of each fleet
    order = paid_order(customer, hours="0.02", environments=2)
    assert Job.objects.filter(order=order, status=Job.Status.OFFERED).count() == 2

    north = first.run_once(max_seconds=60)
    assert north.offers_accepted == 1 and north.offers_declined == 0
    assert len(north.jobs_completed) == 1
    south = second.run_once(max_seconds=60)
    assert south.offers_accepted == 1 and south.offers_declined == 0
    assert {j.fleet.name for j in Job.objects.filter(order=order)} == {"North", "South"}
    assert_delivered(order)


def test_the_command_runs_a_bounded_session(platform, operator, customer, tmp_path, capsys):
    from fleet_agent import cli

    path = tmp_path / "fleet.toml"
    path.write_text(
        f'base_url = "{platform}"\napi_key_env = "TEST_FLEET_KEY"\n'
        '[fleet]\nname = "CLI Fleet"\nweekly_capacity_hours = 40\npayout_rate_per_hour = 50\n'
        '[[sites]]\nname = "Bench"\nkind = "lab_bench"\nobjects = ["peg-8mm"]\n'
        '[[sites.robots]]\nname = "arm"\nembodiment = "franka-fr3"\n'
        "[collection]\npoll_seconds = 0.1\nepisode_seconds = [10, 20]\n"
    )
    import os

    os.environ["TEST_FLEET_KEY"] = operator.raw_key
    try:
        assert cli.main(["--config", str(path), "--register-only"]) == 0
        order = paid_order(customer, hours="0.01")
        code = cli.main(
            ["--config", str(path), "--once", "--max-seconds", "60", "--defect-rate", "0.3"]
        )
    finally:
        del os.environ["TEST_FLEET_KEY"]
    assert code == 0
    out = capsys.readouterr().out
    assert '"stopped_because": "idle"' in out
    assert_delivered(order)


def test_a_receiver_gets_signed_offer_webhooks(platform, operator, customer, settings):
    settings.FLEETS_WEBHOOK_ALLOW_INSECURE = True  # the receiver is on loopback http
    config = config_for(platform, operator.raw_key)
    config = config.__class__(**{**config.__dict__, "webhook": WebhookConfig()})
    FleetAgent(config_for(platform, operator.raw_key)).register()  # an earlier run, no hooks
    agent = FleetAgent(config)
    try:
        agent.register()  # reuses the fleet: rotates its secret, points it at the receiver
        fleet = Fleet.objects.get(pk=agent.fleet["id"])
        assert fleet.webhook_url == agent.receiver.url
        assert fleet.webhook_secret == agent.webhook_secret
        order = paid_order(customer, hours="0.01")  # offer.created is posted to the receiver
        assert agent.summary.webhooks_received["offer.created"] == 1
        assert agent.receiver.rejected == 0
        summary = agent.run_once(max_seconds=60)
    finally:
        agent.close()
    assert summary.offers_accepted == 1
    assert_delivered(order)


def test_with_qa_running_later_the_agent_waits_for_verdicts(
    platform, operator, customer, monkeypatch
):
    """As with a real worker: QA decides after `complete` returns. The agent counts undecided
    episodes as in flight, so it neither stalls nor collects much more than the target."""
    import threading
    import time

    from django.db import OperationalError

    from datasets import tasks as qa_tasks
    from datasets.services.qa import episode_run_qa

    def run_qa(episode_id):
        """As the qa_episode task does: retry transient database errors. (Registration and
        QA accrual can deadlock on the job and order rows; Postgres aborts one side and the
        task, or the agent's request, is retried.)"""
        for attempt in range(5):
            try:
                return episode_run_qa(episode_id=episode_id)
            except OperationalError:
                if attempt == 4:
                    raise
                time.sleep(0.2)

    queued = []
    monkeypatch.setattr(qa_tasks.qa_episode, "delay", queued.append)
    agent = FleetAgent(config_for(platform, operator.raw_key, defect_rate=0.3))
    agent.register()
    order = paid_order(customer, hours="0.02")
    results = {}
    runner = threading.Thread(target=lambda: results.update(s=agent.run_once(max_seconds=90)))
    runner.start()
    try:
        deadline = time.monotonic() + 90
        while runner.is_alive() and time.monotonic() < deadline:
            time.sleep(0.3)  # the "worker" lags behind the uploads
            while queued:
                run_qa(queued.pop(0))
    finally:
        agent.stop()
        runner.join(10)
    while queued:  # an episode uploaded as the job completed is still decided
        run_qa(queued.pop(0))
    summary = results["s"]
    assert summary.stopped_because == "idle", summary.as_dict()
    assert_delivered(order)
    accepted = Episode.objects.filter(order=order, status="accepted")
    overshoot = sum(e.duration_seconds for e in accepted) - order.hours * 3600
    assert overshoot < 25  # at most about one episode more than needed
    assert not Episode.objects.filter(order=order, status__in=["registered", "uploaded"]).exists()
    assert summary.episodes_uploaded == Episode.objects.filter(order=order).count()
    assert summary.episodes_accepted + summary.episodes_rejected <= summary.episodes_uploaded
