"""Agent details that need no platform: expired upload URLs, offer filtering, verdicts."""

from fleet_agent import FleetAgent, parse_config
from fleet_agent.agent import _order_fps
from fleet_agent.client import ApiClient, ApiError, Response
from fleet_agent.episodes import make_episode

CONFIG = {
    "base_url": "http://127.0.0.1:1",
    "api_key": "k",
    "fleet": {"name": "F", "weekly_capacity_hours": 10, "payout_rate_per_hour": 1},
    "sites": [{"name": "S", "kind": "office", "robots": [{"name": "r", "embodiment": "so100"}]}],
}


class FakeClient:
    put_parts = ApiClient.put_parts  # the real cutting of parts, over the fake put_bytes

    def __init__(self):
        self.puts = []
        self.renewed = 0
        self.declined = []
        self.accepted = []

    def put_bytes(self, url, data, headers):
        self.puts.append(url)
        if url == "expired":
            raise ApiError(403, "http_error", "Request has expired")
        return Response(200, {"etag": f'"{len(self.puts)}"'}, b"")

    def renew_upload(self, episode_id):
        self.renewed += 1
        return {"method": "single", "url": "fresh", "headers": {}}

    def offers(self, status):
        job = {
            "id": "j",
            "embodiment": "so100",
            "end_effector": "parallel_gripper",
            "sensors": [],
            "target_hours": "1",
            "task_type": "t",
        }
        return [
            {"id": "mine", "fleet": "f1", "site": "s1", "job": job},
            {"id": "other-fleet", "fleet": "f2", "site": "s9", "job": job},
            {"id": "cannot", "fleet": "f1", "site": "s1", "job": {**job, "sensors": ["tactile"]}},
        ]

    def accept_offer(self, offer_id):
        self.accepted.append(offer_id)

    def decline_offer(self, offer_id, reason):
        self.declined.append((offer_id, reason))


def agent_with_fake():
    client = FakeClient()
    agent = FleetAgent(parse_config(CONFIG), client=client)
    agent.fleet = {"id": "f1"}
    agent.robots = [
        {
            "id": "r1",
            "site": "s1",
            "embodiment": "so100",
            "end_effector": "parallel_gripper",
            "sensors": ["wrist-camera"],
            "active": True,
        }
    ]
    return agent, client


def test_an_expired_upload_url_is_renewed_once():
    agent, client = agent_with_fake()
    episode = make_episode(action_dim=6, seconds=1, seed=0)
    upload = {"method": "single", "url": "expired", "headers": {}}
    assert agent._put("e1", upload, episode) is None
    assert client.puts == ["expired", "fresh"] and client.renewed == 1


def test_multipart_parts_are_cut_by_part_size_and_their_etags_collected():
    agent, client = agent_with_fake()
    episode = make_episode(action_dim=6, seconds=1, seed=0)
    size = episode.size_bytes // 2 + 1
    upload = {
        "method": "multipart",
        "part_size": size,
        "parts": [
            {"part_number": 1, "url": "p1", "headers": {}},
            {"part_number": 2, "url": "p2", "headers": {}},
        ],
    }
    parts = agent._put("e1", upload, episode)
    assert client.puts == ["p1", "p2"]
    assert parts == [{"part_number": 1, "etag": '"1"'}, {"part_number": 2, "etag": '"2"'}]


def test_offers_of_other_fleets_are_left_alone_and_impossible_ones_declined():
    agent, client = agent_with_fake()
    assert agent.handle_offers() == 1
    assert client.accepted == ["mine"]
    assert [offer for offer, _ in client.declined] == ["cannot"]
    assert "tactile" in client.declined[0][1]


def test_the_orders_frame_rate_is_read_from_the_refusal():
    refusal = ApiError(
        400,
        "invalid",
        "This order's episodes are recorded at 50 fps.",
        {"fps": ["This order's episodes are recorded at 50 fps."]},
    )
    assert _order_fps(refusal) == 50
    assert _order_fps(ApiError(400, "invalid", "x", {"site": ["y"]})) is None
