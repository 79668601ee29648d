"""Delivery versions (v1, v2, ...): each with its own prefix, files and manifest; the old one's
links keep working until revoked; the API and the order page show the latest by default; a
version filtered by quality or operators."""

import json
import uuid

import pytest

from datasets.episode_format import episode_table, parquet_bytes
from datasets.models import Delivery, Episode
from tests.datasets import lerobot_loader
from tests.datasets.helpers import Collection, upload_episode
from tests.datasets.test_deliveries import fetch, link

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("s3", "eager_celery")]


@pytest.fixture
def two_operators(fleet_operator, customer, django_capture_on_commit_callbacks):
    """An order of 0.01 h delivered from two 20 s episodes by operators op-a and op-b."""
    collection = Collection(fleet_operator, customer, target_hours="0.01")
    for seed, operator in ((1, "op-a"), (2, "op-b")):
        upload_episode(
            collection,
            parquet_bytes(episode_table(frames=600, seed=seed)),
            django_capture_on_commit_callbacks,
            operator=operator,
        )
    return collection, Delivery.objects.get(order=collection.order)


def _manifest(client, delivery_id) -> dict:
    response = link(client, delivery_id)
    assert response.status_code == 302, response.json()
    return json.loads(fetch(response["Location"]))


def _new_version(client, order, capture, **body):
    with capture(execute=True):
        return client.post(f"/api/v1/orders/{order.id}/deliveries", body, format="json")


def test_a_filtered_version_has_its_own_prefix_manifest_and_replaces_the_old_one(
    two_operators, customer, django_capture_on_commit_callbacks
):
    collection, v1 = two_operators
    assert v1.version == 1 and v1.status == Delivery.Status.READY
    # when: the customer asks for a version without op-a
    response = _new_version(
        customer.client,
        collection.order,
        django_capture_on_commit_callbacks,
        filters={"exclude_operators": ["op-a"]},
        reason="without op-a",
    )
    # then
    assert response.status_code == 201, response.json()
    v2 = Delivery.objects.get(pk=response.json()["id"])
    v1.refresh_from_db()
    assert (v2.version, v2.previous_id, v2.status) == (2, v1.id, Delivery.Status.READY)
    assert v2.prefix != v1.prefix and v2.episodes == 1 and v1.episodes == 2
    assert v1.superseded_at is not None and v2.superseded_at is None
    manifest = _manifest(customer.client, v2.id)
    assert manifest["dataset_version"] == 2 and manifest["previous_delivery"] == str(v1.id)
    assert manifest["filters"] == {"exclude_operators": ["op-a"]}
    # v2 is ready: v1 issues no new links (issue 28), and says which version replaces it
    old = link(customer.client, v1.id)
    assert old.status_code == 409 and old.json()["code"] == "delivery_superseded"
    assert old.json()["fields"]["delivery"] == [str(v2.id)]
    # the API lists the latest by default, every version on request
    base = f"/api/v1/orders/{collection.order.id}/deliveries"
    latest = customer.client.get(base).json()["results"]
    assert [(d["id"], d["version"], d["latest"]) for d in latest] == [(str(v2.id), 2, True)]
    every = customer.client.get(base, {"versions": "all"}).json()["results"]
    assert [d["version"] for d in every] == [2, 1] and every[1]["latest"] is False
    # revoking v1 stops v1's links only
    assert customer.client.post(f"/api/v1/deliveries/{v1.id}/revoke").status_code == 200
    assert link(customer.client, v1.id).status_code == 409
    assert link(customer.client, v2.id).status_code == 302


def test_a_version_filtered_by_minimum_quality_keeps_only_the_better_episodes(
    two_operators, customer, django_capture_on_commit_callbacks
):
    collection, _v1 = two_operators
    scores = sorted(
        Episode.objects.filter(order=collection.order).values_list("quality_score", flat=True)
    )
    assert scores[0] < scores[1], scores
    response = _new_version(
        customer.client,
        collection.order,
        django_capture_on_commit_callbacks,
        filters={"min_quality": scores[1]},
    )
    assert response.status_code == 201, response.json()
    v2 = Delivery.objects.get(pk=response.json()["id"])
    assert v2.episodes == 1 and v2.filters == {"min_quality": scores[1]}


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"min_quality": 2}, "min_quality"),
        ({"min_quality": "high"}, "min_quality"),
        ({"exclude_operators": ["nobody"]}, "exclude_operators"),
        ({"exclude_operators": "op-a"}, "exclude_operators"),
        ({"colour": "red"}, "filters"),
    ],
)
def test_bad_filters_are_a_400_naming_the_field(two_operators, customer, filters, field):
    collection, _ = two_operators
    response = customer.client.post(
        f"/api/v1/orders/{collection.order.id}/deliveries", {"filters": filters}, format="json"
    )
    assert response.status_code == 400 and field in response.json()["fields"], response.json()
    assert Delivery.objects.filter(order=collection.order).count() == 1


def test_other_tenants_get_404_fleets_403_and_no_version_before_a_ready_one(
    two_operators, other_customer, fleet_operator, customer, make_tenant
):
    collection, _ = two_operators
    url = f"/api/v1/orders/{collection.order.id}/deliveries"
    assert other_customer.client.post(url, {}, format="json").status_code == 404
    assert fleet_operator.client.post(url, {}, format="json").status_code == 403
    pilot = customer.client.post(url, {"kind": "pilot"}, format="json")
    assert pilot.status_code == 409 and pilot.json()["code"] == "delivery_not_ready"
    assert Delivery.objects.filter(order=collection.order).count() == 1


def test_the_order_page_shows_the_latest_version_and_keeps_the_earlier_ones(
    two_operators, customer, django_capture_on_commit_callbacks
):
    collection, v1 = two_operators
    _new_version(
        customer.client,
        collection.order,
        django_capture_on_commit_callbacks,
        filters={"exclude_operators": ["op-b"]},
        reason="without op-b",
    )
    page = customer.session_client().get(f"/orders/{collection.order.id}/").content.decode()
    latest_at = page.index("Full dataset v2: ready")
    older_at = page.index('id="older-versions"')
    assert latest_at < older_at < page.index(f'id="delivery-{v1.id}"')
    assert "Version 2: without op-b" in page


def _download(client, delivery_id, root):
    for entry in client.get(f"/api/v1/deliveries/{delivery_id}/files").json():
        target = root / entry["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(fetch(link(client, delivery_id, entry["path"])["Location"]))
    return root


def test_meta_episodes_carry_quality_columns_and_the_card_the_distribution(
    two_operators, customer, django_capture_on_commit_callbacks, tmp_path
):
    collection, v1 = two_operators
    root = _download(customer.client, v1.id, tmp_path / "v1")
    # LeRobot's loader (the layout's rules) still loads it, extra columns and all
    dataset = lerobot_loader.load(root)
    lerobot_loader.check_invariants(dataset)
    episodes = {e.pk: e for e in Episode.objects.filter(order=collection.order)}
    rows = dataset["episodes"]
    for row, episode_id in zip(rows, v1.episode_ids, strict=True):
        episode = episodes[uuid.UUID(episode_id)]
        assert row["operator"] == episode.operator
        assert row["quality_score"] == pytest.approx(episode.quality_score)
        assert row["idle_fraction"] == pytest.approx(episode.idle_fraction)
        assert row["jerk"] == pytest.approx(episode.jerk)
    card = (root / "README.md").read_text()
    scores = sorted(e.quality_score for e in episodes.values())
    assert "## Quality" in card and "- scored episodes: 2" in card
    assert f"min {round(scores[0], 4)}" in card and f"max {round(scores[1], 4)}" in card
    histogram = [line for line in card.splitlines() if line.startswith("| 0.")]
    assert sum(int(line.split("|")[2]) for line in histogram) == 2
    # a filtered version says what it keeps
    response = _new_version(
        customer.client,
        collection.order,
        django_capture_on_commit_callbacks,
        filters={"exclude_operators": ["op-a"]},
    )
    v2_root = _download(customer.client, response.json()["id"], tmp_path / "v2")
    v2_card = (v2_root / "README.md").read_text()
    assert "Version 2 of this dataset." in v2_card and "operators op-a" in v2_card
    assert [e["operator"] for e in lerobot_loader.load(v2_root)["episodes"]] == ["op-b"]
